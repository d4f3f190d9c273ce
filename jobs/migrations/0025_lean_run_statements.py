# The guarded run's statements, leaner (bench/lease_bench.py; each found with pgbench and perf on
# the server):
# - A run is looked up by its id alone, its status tested with IS NOT DISTINCT FROM (which is no
#   index condition): with `status = 'scheduled'` the planner may walk the status index instead of
#   the primary key whenever it believes few runs have that status (an empty or fresh table, or
#   statistics taken in a quiet hour), and then every claim of a burst, every finish and the
#   alerts trigger at each commit read all the runs of that status: O(runs) each.
# - The claim and finish return their row by assigning it (no query to start), the claim reads
#   whether the job has downstreams in its first statement, and the finish decides on a retry
#   with plain expressions unless the run was lost.
# - The alerts trigger reads the run and whether its job has any open incident in one probe, and
#   calls the incident functions only when there is something to open or resolve.
# The functions' text as installed here: migrations/sql/0025_*.sql (frozen).

from django.db import migrations

from jobs.database import postgres_only


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0024_job_failures_index'),
    ]

    operations = [
        migrations.RunPython(
            postgres_only.run_frozen_sql(
                "0025_claim_run.sql", "0025_finish_run.sql", "0025_run_outcome_alerts.sql"
            ),
            postgres_only.run_frozen_sql(
                "0022_claim_run.sql", "0015_finish_run.sql", "0013_run_outcome_alerts.sql"
            ),
        ),
    ]
