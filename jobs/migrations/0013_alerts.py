# Alerts: incidents, the outbox of their notifications, a job's alert settings, and
# the database functions that open and resolve incidents.
#
# Incidents are opened and resolved in one place, these functions, so that the outbox rows are
# written in the same transaction as what caused them (guarantee 8, "told once"):
# - a run's outcome: a deferred constraint trigger on jobs_jobrun fires at the commit of the
#   transaction that recorded it, whichever path wrote it (the fenced finish, maintenance
#   recording missed or lost, catch-up, a tenure's end, straight SQL). Deferred, so it sees the
#   retry that the same transaction may have scheduled: a failure with a retry due is not an
#   incident yet, its last retry's outcome is;
# - the checks of jobs.alerts.detect (stuck runs, the dead-man's switch, no live beat or node)
#   call jobs_open_incident / jobs_resolve_incidents in their own statements.
# The partial unique index one_open_incident_per_job_kind lets one incident per (job, kind) be
# open, so concurrent writers append to it instead of opening another; one_delivery_per_event_
# channel lets each event be queued once per channel.

import django.db.models.deletion
import django.db.models.functions.datetime
import jobs.models
from django.db import migrations, models

from jobs import postgres_only

FUNCTIONS = """
-- The channels an incident of p_job_id opened for p_reason is notified on now: none while the
-- job is muted, alerts for none or other reasons; cluster incidents (no job) on every channel.
CREATE OR REPLACE FUNCTION jobs_alert_channels(p_job_id bigint, p_reason text)
RETURNS text[] LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_job_id IS NULL THEN ARRAY['webhook', 'email']
        WHEN j.id IS NULL OR j.alert_channels = 'none'
             OR coalesce(j.alerts_muted_until > now(), false)
             OR (j.alert_reasons NOT IN ('[]'::jsonb, 'null'::jsonb)
                 AND NOT j.alert_reasons ? p_reason) THEN ARRAY[]::text[]
        WHEN j.alert_channels = 'default' THEN ARRAY['webhook', 'email']
        ELSE ARRAY[j.alert_channels::text] END
      FROM (SELECT 1) AS one LEFT JOIN jobs_job AS j ON j.id = p_job_id
$$;

-- Opens the (job, kind) incident, or appends run p_run_id to the one open. Queues its
-- 'opened' notification once: when it opens, or when a later bad run finds it not notified
-- yet (it opened while the job was muted, or for a reason the job is not alerted for).
-- Returns the incident's id when this call opened it.
CREATE OR REPLACE FUNCTION jobs_open_incident(
    p_job_id bigint, p_kind text, p_reason text, p_summary text, p_run_id bigint
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_new boolean;
BEGIN
    INSERT INTO jobs_incident AS i (job_id, kind, reason, summary, first_run_id, last_run_id)
    VALUES (p_job_id, p_kind, p_reason, left(coalesce(p_summary, ''), 2000), p_run_id,
            p_run_id)
    ON CONFLICT (job_id, kind) WHERE resolved_at IS NULL DO UPDATE
       SET last_run_id = EXCLUDED.last_run_id, bad_runs = i.bad_runs + 1
     WHERE EXCLUDED.last_run_id IS NOT NULL
       AND EXCLUDED.last_run_id IS DISTINCT FROM i.last_run_id
    RETURNING i.id, i.xmax = 0 INTO v_id, v_new;
    IF v_id IS NULL THEN
        RETURN NULL;  -- open already, and nothing new to append
    END IF;
    IF v_new OR NOT EXISTS (SELECT 1 FROM jobs_alertdelivery
                             WHERE incident_id = v_id AND event = 'opened') THEN
        INSERT INTO jobs_alertdelivery (incident_id, event, channel)
        SELECT v_id, 'opened', c FROM unnest(jobs_alert_channels(p_job_id, p_reason)) AS c
        ON CONFLICT (incident_id, event, channel) DO NOTHING;
    END IF;
    RETURN CASE WHEN v_new THEN v_id END;
END
$$;

-- Resolves the open incidents of p_job_id (NULL: the cluster's) of the given kinds; a stuck
-- incident only by its own run. Each one whose opening was notified gets its 'resolved'
-- notification on the same channels. Returns the ids resolved.
CREATE OR REPLACE FUNCTION jobs_resolve_incidents(
    p_job_id bigint, p_kinds text[], p_run_id bigint
) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    IF p_job_id IS NULL THEN
        WITH resolved AS (
            UPDATE jobs_incident SET resolved_at = now(), resolved_by_run_id = p_run_id
             WHERE job_id IS NULL AND kind = ANY (p_kinds) AND resolved_at IS NULL
            RETURNING id
        )
        SELECT array_agg(id) INTO v_ids FROM resolved;
    ELSE
        WITH resolved AS (
            UPDATE jobs_incident SET resolved_at = now(), resolved_by_run_id = p_run_id
             WHERE job_id = p_job_id AND kind = ANY (p_kinds) AND resolved_at IS NULL
               AND (kind <> 'stuck' OR last_run_id = p_run_id)
            RETURNING id
        )
        SELECT array_agg(id) INTO v_ids FROM resolved;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO jobs_alertdelivery (incident_id, event, channel)
    SELECT d.incident_id, 'resolved', d.channel FROM jobs_alertdelivery AS d
     WHERE d.incident_id = ANY (v_ids) AND d.event = 'opened'
    ON CONFLICT (incident_id, event, channel) DO NOTHING;
    RETURN QUERY SELECT unnest(v_ids);
END
$$;

-- A run's outcome, at the commit of the transaction that recorded it.
CREATE OR REPLACE FUNCTION jobs_run_outcome_alerts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Judged as the run is at the commit: a later change of it has an event of its own.
    IF NOT EXISTS (SELECT 1 FROM jobs_jobrun WHERE id = NEW.id AND status = NEW.status) THEN
        RETURN NULL;
    END IF;
    IF NEW.status IN ('failed', 'missed', 'lost') THEN
        PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['stuck'], NEW.id);
        -- A retry recorded with this outcome decides instead (its own outcome will count).
        IF NOT EXISTS (SELECT 1 FROM jobs_jobrun WHERE retry_of_id = NEW.id) THEN
            PERFORM jobs_open_incident(NEW.job_id, 'failing', NEW.status, NEW.error, NEW.id);
        END IF;
    ELSIF NEW.status IN ('succeeded', 'running') THEN
        -- 'running': a continuous job's new tenure, its way of being healthy again.
        PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['failing', 'overdue', 'stuck'],
                                       NEW.id);
    ELSE
        PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['stuck'], NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER jobs_run_outcome_alerts AFTER UPDATE OF status ON jobs_jobrun
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status NOT IN ('scheduled', 'running'))
    EXECUTE FUNCTION jobs_run_outcome_alerts();
CREATE CONSTRAINT TRIGGER jobs_run_recorded_alerts AFTER INSERT ON jobs_jobrun
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.status IN ('failed', 'missed', 'lost')
          OR (NEW.status = 'running' AND NEW.trigger = 'continuous'))
    EXECUTE FUNCTION jobs_run_outcome_alerts();
"""

DROP = """
DROP TRIGGER IF EXISTS jobs_run_recorded_alerts ON jobs_jobrun;
DROP TRIGGER IF EXISTS jobs_run_outcome_alerts ON jobs_jobrun;
DROP FUNCTION IF EXISTS jobs_run_outcome_alerts();
DROP FUNCTION IF EXISTS jobs_resolve_incidents(bigint, text[], bigint);
DROP FUNCTION IF EXISTS jobs_open_incident(bigint, text, text, text, bigint);
DROP FUNCTION IF EXISTS jobs_alert_channels(bigint, text);
"""


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0012_audit_trail'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='alert_channels',
            field=models.CharField(choices=[('default', 'default: every channel the cluster configures'), ('webhook', 'webhook only'), ('email', 'e-mail only'), ('none', 'none: never alert')], default='default', help_text="Where this job's incidents are notified.", max_length=16),
        ),
        migrations.AddField(
            model_name='job',
            name='alert_reasons',
            field=models.JSONField(blank=True, default=list, validators=[jobs.models.validate_alert_reasons], help_text='The reasons alerted for (failed, missed, lost, stuck, overdue); empty: all.'),
        ),
        migrations.AddField(
            model_name='job',
            name='alerts_muted_until',
            field=models.DateTimeField(blank=True, help_text='No notification for incidents opened before then (they still show).', null=True),
        ),
        migrations.CreateModel(
            name='Incident',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('kind', models.CharField(choices=[('failing', 'failing: runs ending failed, missed or lost'), ('stuck', 'stuck: a run running past its time limit or typical duration'), ('overdue', 'overdue: no successful run within its expected window'), ('no_beat', 'no live beat'), ('no_node', 'no live node')], max_length=16)),
                ('reason', models.CharField(choices=[('failed', 'Failed'), ('missed', 'Missed'), ('lost', 'Lost'), ('stuck', 'Stuck'), ('overdue', 'Overdue'), ('no_beat', 'No Beat'), ('no_node', 'No Node')], help_text='What opened it.', max_length=16)),
                ('summary', models.TextField(blank=True, db_default='', help_text='Why, in words.')),
                ('opened_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), help_text='Database clock.')),
                ('resolved_at', models.DateTimeField(blank=True, help_text='Database clock.', null=True)),
                ('first_run_id', models.BigIntegerField(blank=True, null=True)),
                ('last_run_id', models.BigIntegerField(blank=True, null=True)),
                ('resolved_by_run_id', models.BigIntegerField(blank=True, null=True)),
                ('bad_runs', models.PositiveIntegerField(db_default=1, help_text='Bad runs it covers.')),
                ('job', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='incidents', to='jobs.job')),
            ],
            options={
                'ordering': ['-opened_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='AlertDelivery',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('event', models.CharField(choices=[('opened', 'Opened'), ('resolved', 'Resolved')], max_length=16)),
                ('channel', models.CharField(choices=[('webhook', 'Webhook'), ('email', 'Email')], max_length=16)),
                ('state', models.CharField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'), ('failed', 'failed: gave up'), ('dropped', 'dropped: channel not configured')], db_default='pending', max_length=16)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('next_attempt_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('attempts', models.PositiveIntegerField(db_default=0)),
                ('last_error', models.TextField(blank=True, db_default='')),
                ('delivered_at', models.DateTimeField(blank=True, null=True)),
                ('incident', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deliveries', to='jobs.incident')),
            ],
            options={
                'verbose_name_plural': 'alert deliveries',
                'ordering': ['-id'],
            },
        ),
        migrations.AddConstraint(
            model_name='incident',
            constraint=models.UniqueConstraint(condition=models.Q(('resolved_at__isnull', True)), fields=('job', 'kind'), name='one_open_incident_per_job_kind', nulls_distinct=False),
        ),
        migrations.AddIndex(
            model_name='alertdelivery',
            index=models.Index(condition=models.Q(('state', 'pending')), fields=['next_attempt_at'], name='alertdelivery_due'),
        ),
        migrations.AddConstraint(
            model_name='alertdelivery',
            constraint=models.UniqueConstraint(fields=('incident', 'event', 'channel'), name='one_delivery_per_event_channel'),
        ),
        migrations.RunPython(postgres_only.run_sql(FUNCTIONS), postgres_only.run_sql(DROP)),
    ]
