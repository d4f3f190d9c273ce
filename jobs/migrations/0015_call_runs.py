# Runs of ad-hoc calls of guarded tasks (jobs.calls): trigger 'call', and the call's own args and
# kwargs on the run (NULL for every other run: the job's). The claim function now returns the
# run's arguments when it has its own, so the runner calls (and derives a lock key from) the
# call's; the finish function copies them onto a retry, as records._RETRY_CTE does. The functions'
# text as installed here: migrations/sql/0015_*.sql (frozen).

from django.db import migrations, models

from jobs.database import postgres_only


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0014_adoption'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobrun',
            name='args',
            field=models.JSONField(blank=True, help_text="The arguments of this call (empty: the job's).", null=True),
        ),
        migrations.AddField(
            model_name='jobrun',
            name='kwargs',
            field=models.JSONField(blank=True, help_text="The keyword arguments of this call (empty: the job's).", null=True),
        ),
        migrations.AlterField(
            model_name='jobrun',
            name='trigger',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('manual', 'Manual'), ('api', 'Api'), ('continuous', 'Continuous'), ('retry', 'Retry'), ('call', 'Call')], db_default='scheduled', max_length=16),
        ),
        migrations.RunPython(
            postgres_only.run_frozen_sql("0015_claim_run.sql", "0015_finish_run.sql"),
            postgres_only.run_frozen_sql("0008_claim_run.sql", "0008_finish_run.sql"),
        ),
    ]
