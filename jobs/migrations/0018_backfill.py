# Backfill (jobs.backfill): runs with trigger 'backfill' for past slots that have none. The slot's
# one run may now be a scheduled or a backfill run (one_run_per_slot covers both). A backfill run
# waits unpublished until released (released_at), and its start deadline counts from its release,
# not from its past slot: the claim function says so, and now also returns the run's trigger, so
# the runner releases the job's next backfill run when one ends.

import importlib

from django.db import migrations, models

from jobs import postgres_only

_0015 = importlib.import_module("jobs.migrations.0015_call_runs")
_replaced = _0015._replaced

DROP_CLAIM = "DROP FUNCTION IF EXISTS jobs_claim_run(bigint, text, integer, text, text, text[]);\n"

CLAIM = _replaced(
    _replaced(
        _replaced(
            _replaced(
                _replaced(
                    _0015.CLAIM,
                    "    o_queue text, o_priority smallint\n) LANGUAGE",
                    "    o_queue text, o_priority smallint, o_trigger text\n) LANGUAGE",
                ),
                "    v_holder_token bigint;\n",
                "    v_holder_token bigint;\n    v_deadline_from timestamptz;\n",
            ),
            "           j.priority\n      INTO r",
            "           j.priority, jr.trigger, jr.released_at\n      INTO r",
        ),
        """    IF now() > r.scheduled_for + make_interval(secs => r.start_deadline) THEN
        -- Past the start deadline by the database clock: recorded missed, never run late.
        v_status := 'missed';
        v_error := format('claimed %s s after its slot, past the start deadline of %s s',
                          round(extract(epoch FROM now() - r.scheduled_for)::numeric, 1),
                          r.start_deadline);""",
        """    -- run_records.deadline_from_pg: a backfill run's deadline counts from its release.
    v_deadline_from := CASE WHEN r.trigger = 'backfill' THEN r.released_at
                            ELSE r.scheduled_for END;
    IF now() > v_deadline_from + make_interval(secs => r.start_deadline) THEN
        -- Past the start deadline by the database clock: recorded missed, never run late.
        v_status := 'missed';
        v_error := format('claimed %s s after its %s, past the start deadline of %s s',
                          round(extract(epoch FROM now() - v_deadline_from)::numeric, 1),
                          CASE WHEN r.trigger = 'backfill' THEN 'release' ELSE 'slot' END,
                          r.start_deadline);""",
    ),
    "r.time_limit, r.lease_ttl, r.min_hold, r.queue::text, r.priority;",
    "r.time_limit, r.lease_ttl, r.min_hold, r.queue::text, r.priority, r.trigger::text;",
)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0017_coalesce'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='jobrun',
            name='one_run_per_slot',
        ),
        migrations.AddField(
            model_name='jobrun',
            name='released_at',
            field=models.DateTimeField(blank=True, help_text='When this backfill run was released to the queue (its start deadline counts from then).', null=True),
        ),
        migrations.AlterField(
            model_name='auditentry',
            name='action',
            field=models.CharField(choices=[('add', 'Add'), ('edit', 'Edit'), ('delete', 'Delete'), ('pause', 'Pause'), ('resume', 'Resume'), ('run_now', 'Run Now'), ('backfill', 'Backfill'), ('release_lease', 'Release Lease'), ('prune', 'Prune'), ('token_create', 'Token Create'), ('token_revoke', 'Token Revoke')], max_length=16),
        ),
        migrations.AlterField(
            model_name='jobrun',
            name='trigger',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('manual', 'Manual'), ('api', 'Api'), ('continuous', 'Continuous'), ('retry', 'Retry'), ('call', 'Call'), ('backfill', 'Backfill')], db_default='scheduled', max_length=16),
        ),
        migrations.AddIndex(
            model_name='jobrun',
            index=models.Index(condition=models.Q(('status__in', ['scheduled', 'running']), ('trigger', 'backfill')), fields=['job', 'released_at', 'scheduled_for'], name='jobrun_backfill_pending'),
        ),
        migrations.AddConstraint(
            model_name='jobrun',
            constraint=models.UniqueConstraint(condition=models.Q(('trigger__in', ('scheduled', 'backfill'))), fields=('job', 'scheduled_for'), name='one_run_per_slot'),
        ),
        migrations.RunPython(
            postgres_only.run_sql(DROP_CLAIM + CLAIM),
            postgres_only.run_sql(DROP_CLAIM + _0015.CLAIM),
        ),
    ]
