# Rate limits: at most rate_limit_runs starts of a job in any rate_limit_period seconds. The claim
# takes one of rate_limit_runs leases named rate:NAME#1 … #N, each held for the period and never
# given back early, before the job's own lease; with none free the run is recorded skipped,
# saying when the next may start. A run skipped for its job's lease (overlap skip) gives its
# rate lease back, so only runs that start count. The claim's text as installed here:
# migrations/sql/0020_claim_run.sql (frozen).

import django.core.validators
from django.db import migrations, models

from jobs.database import postgres_only


class Migration(migrations.Migration):

    dependencies = [
        ('django_celery_beat', '0019_alter_periodictasks_options'),
        ('jobs', '0019_max_concurrency'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='rate_limit_period',
            field=models.PositiveIntegerField(blank=True, help_text='The period of the rate limit, in seconds.', null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='job',
            name='rate_limit_runs',
            field=models.PositiveSmallIntegerField(blank=True, help_text='At most this many runs start per rate limit period (empty: no limit); a run over it is recorded skipped.', null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)]),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('rate_limit_period__isnull', True), ('rate_limit_runs__isnull', True)), models.Q(('rate_limit_period__isnull', False), ('rate_limit_runs__isnull', False)), _connector='OR'), name='rate_limit_has_runs_and_period'),
        ),
        migrations.RunPython(
            postgres_only.run_frozen_sql("0020_claim_run.sql"),
            postgres_only.run_frozen_sql("0019_claim_run.sql"),
        ),
    ]
