# Backfill (jobs.backfill): runs with trigger 'backfill' for past slots that have none. The slot's
# one run may now be a scheduled or a backfill run (one_run_per_slot covers both). A backfill run
# waits unpublished until released (released_at), and its start deadline counts from its release,
# not from its past slot: the claim function says so, and now also returns the run's trigger, so
# the runner releases the job's next backfill run when one ends. The claim's text as installed
# here: migrations/sql/0018_claim_run.sql (frozen).

from django.db import migrations, models

from jobs.database import postgres_only

DROP_CLAIM = "DROP FUNCTION IF EXISTS jobs_claim_run(bigint, text, integer, text, text, text[]);\n"


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
            postgres_only.run_frozen_sql("0018_claim_run.sql", first=DROP_CLAIM),
            postgres_only.run_frozen_sql("0015_claim_run.sql", first=DROP_CLAIM),
        ),
    ]
