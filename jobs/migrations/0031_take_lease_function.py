# One home for the take-over of a lapsed lease in the database's functions: jobs_take_lease,
# which the claim calls for its job's leases and for its rate limit's, instead of two copies of
# the upsert in two loops (jobs/sql/lease.sql). The call costs about 4 us more per lease taken
# (a PL/pgSQL loop of 3,000 take-overs, inline against through the function, on a loaded 2-core
# machine): 1 to 2 % of a claim. The functions' text as installed here: migrations/sql/0031_*.sql
# (frozen).

from django.db import migrations

from jobs.database import postgres_only

# The reverse drops it and puts back the claim of 0025, which does not call it.
DROP_TAKE_LEASE = "DROP FUNCTION IF EXISTS jobs_take_lease(text, text, integer);\n"


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0030_configuration_problems'),
    ]

    operations = [
        migrations.RunPython(
            postgres_only.run_frozen_sql("0031_take_lease.sql", "0031_claim_run.sql"),
            postgres_only.run_frozen_sql("0025_claim_run.sql", first=DROP_TAKE_LEASE),
        ),
    ]
