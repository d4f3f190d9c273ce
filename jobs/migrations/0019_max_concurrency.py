# Concurrency caps: a job's max_concurrency N gives its lock key N leases (key#1 … key#N, as
# jobs.guard.lease.slot_keys names them) instead of one. The claim function tries them in order
# and takes the first that is free or lapsed (each with its own fencing token); it skips a run
# (overlap skip) only when all N are held. It now also returns max_concurrency, so the runner
# knows how many keys to try for a key derived from arguments or under overlap wait. The claim's
# text as installed here: migrations/sql/0019_claim_run.sql (frozen).

import django.core.validators
from django.db import migrations, models

from jobs.database import postgres_only

DROP_CLAIM = "DROP FUNCTION IF EXISTS jobs_claim_run(bigint, text, integer, text, text, text[]);\n"


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0018_backfill'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='max_concurrency',
            field=models.PositiveSmallIntegerField(db_default=1, default=1, help_text='How many runs of this job (per lock key) may run at once; 1: a singleton.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)]),
        ),
        migrations.RunPython(
            postgres_only.run_frozen_sql("0019_claim_run.sql", first=DROP_CLAIM),
            postgres_only.run_frozen_sql("0018_claim_run.sql", first=DROP_CLAIM),
        ),
    ]
