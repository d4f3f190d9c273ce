# Duration baselines (issue 45, part 4; jobs.alerts.baseline): a job's settings for judging its
# runs' durations; "stuck" renamed "running long" (incidents, their reasons and the reasons a
# job is alerted for, rewritten here; "stuck" stays a readable choice and the SQL resolves it as
# running_long, for a process not yet upgraded that records one); a new reason, "too short".
# The functions' text as installed here: migrations/sql/0039_*.sql (frozen).

import django.core.validators
import jobs.models
from django.db import migrations, models

from jobs.database import postgres_only


def _renamed(old, new):
    def rename(apps, schema_editor):
        Incident = apps.get_model("jobs", "Incident")
        Job = apps.get_model("jobs", "Job")
        Incident.objects.filter(kind=old).update(kind=new)
        Incident.objects.filter(reason=old).update(reason=new)
        for job in Job.objects.exclude(alert_reasons=[]).only("pk", "alert_reasons"):
            reasons = job.alert_reasons
            if isinstance(reasons, list) and old in reasons:
                job.alert_reasons = [new if reason == old else reason for reason in reasons]
                job.save(update_fields=["alert_reasons"])

    return rename


def _forget_too_short(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    for job in Job.objects.exclude(alert_reasons=[]).only("pk", "alert_reasons"):
        if isinstance(job.alert_reasons, list) and "too_short" in job.alert_reasons:
            job.alert_reasons = [r for r in job.alert_reasons if r != "too_short"]
            job.save(update_fields=["alert_reasons"])
    apps.get_model("jobs", "Incident").objects.filter(kind="too_short").delete()


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0038_pause_reason_and_end'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='baseline_alerts',
            field=models.BooleanField(db_default=True, default=True, help_text="Judge runs against the job's duration baseline (running long past the long run factor x its p95, too short under a tenth of its median). Off: only the maximum and minimum durations and the time limits apply."),
        ),
        migrations.AddField(
            model_name='job',
            name='min_duration',
            field=models.PositiveIntegerField(blank=True, help_text='Seconds under which a success is too short: the run that did nothing (empty: only its baseline judges).', null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='job',
            name='long_run_factor',
            field=models.FloatField(blank=True, help_text='A run is running long past this many times the p95 of its last successful durations (empty: 3).', null=True, validators=[django.core.validators.MinValueValidator(1.1), django.core.validators.MaxValueValidator(100.0)]),
        ),
        migrations.AddField(
            model_name='job',
            name='max_duration',
            field=models.PositiveIntegerField(blank=True, help_text='Seconds after which a run is running long, whatever its baseline or time limit (empty: judged by those).', null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AlterField(
            model_name='incident',
            name='kind',
            field=models.CharField(choices=[('failing', 'failing: runs ending failed, missed or lost'), ('running_long', 'running long: a run past its maximum, time limit or baseline'), ('too_short', 'too short: a success far faster than its baseline or minimum'), ('stuck', 'running long (recorded as stuck)'), ('overdue', 'overdue: no successful run within its expected window'), ('no_beat', 'no live beat'), ('no_node', 'no live node')], max_length=16),
        ),
        migrations.AlterField(
            model_name='incident',
            name='reason',
            field=models.CharField(choices=[('failed', 'Failed'), ('missed', 'Missed'), ('lost', 'Lost'), ('running_long', 'Running Long'), ('too_short', 'Too Short'), ('stuck', 'Running long (recorded as stuck)'), ('overdue', 'Overdue'), ('no_beat', 'No Beat'), ('no_node', 'No Node')], help_text='What opened it.', max_length=16),
        ),
        migrations.AlterField(
            model_name='job',
            name='alert_reasons',
            field=models.JSONField(blank=True, default=list, help_text='The reasons alerted for (failed, missed, lost, running_long, too_short, overdue); empty: all.', validators=[jobs.models.validate_alert_reasons]),
        ),
        migrations.RunPython(migrations.RunPython.noop, _forget_too_short),
        migrations.RunPython(_renamed("stuck", "running_long"), _renamed("running_long", "stuck")),
        migrations.RunPython(
            postgres_only.run_frozen_sql(
                "0039_resolve_incidents.sql", "0039_run_outcome_alerts.sql"
            ),
            postgres_only.run_frozen_sql(
                "0013_incident_functions.sql", "0034_run_outcome_alerts.sql"
            ),
        ),
    ]
