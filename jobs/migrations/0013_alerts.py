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
# The functions and triggers as installed here: migrations/sql/0013_*.sql (frozen); their current
# text: jobs/sql/alerts.sql.

import django.db.models.deletion
import django.db.models.functions.datetime
import jobs.models
from django.db import migrations, models

from jobs.database import postgres_only

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
        migrations.RunPython(
            postgres_only.run_frozen_sql(
                "0013_incident_functions.sql",
                "0013_run_outcome_alerts.sql",
                "0013_alert_triggers.sql",
            ),
            postgres_only.run_sql(DROP),
        ),
    ]
