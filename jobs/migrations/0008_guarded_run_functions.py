# A guarded run's two statements as PL/pgSQL functions (issue 4, throughput), and two fewer
# index entries for each run update.
#
# records.claim and records.finish_fenced were single statements of chained CTEs; the same work
# as functions costs the server about a sixth less CPU per run (measured in the closing note of
# issue 4): the executor no longer builds and evaluates every branch (late, skipped, retry) for
# each run, only the one taken. Still one round trip each, and still one transaction each.
# The lease rules are those of jobs/guard/lease.py (TAKE_OVER_IF_LAPSED_PG, RELEASE_EXPIRY_PG); the
# lease contract suite and the run tests hold both to the same behaviour.
#
# The functions' text as installed here is frozen in migrations/sql/0008_*.sql; their current text
# is jobs/sql/claim_run.sql and jobs/sql/finish_run.sql.

import django.db.models.deletion
from django.db import migrations, models

from jobs.database import postgres_only

DROP = """
DROP FUNCTION IF EXISTS jobs_claim_run(bigint, text, integer, text, text, text[]);
DROP FUNCTION IF EXISTS jobs_finish_run(bigint, text, bigint, text, text, text, text,
                                        double precision, double precision);
"""


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0007_run_folded'),
    ]

    operations = [
        migrations.AlterField(
            model_name='jobrun',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='jobs.job'),
        ),
        migrations.AlterField(
            model_name='jobrun',
            name='retry_of',
            field=models.ForeignKey(blank=True, db_index=False, help_text='The run this one retries (after an exception or a lost node).', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='retries', to='jobs.jobrun'),
        ),
        migrations.AddIndex(
            model_name='jobrun',
            index=models.Index(condition=models.Q(('retry_of__isnull', False)), fields=['retry_of'], name='jobrun_retry_of'),
        ),
        migrations.RunPython(
            postgres_only.run_frozen_sql("0008_claim_run.sql", "0008_finish_run.sql"),
            postgres_only.run_sql(DROP),
        ),
    ]
