# Incidents follow their cause (issue 41), in the run outcome trigger:
# - a bad run joins the job's open overdue incident instead of opening a failing one beside it
#   (one incident per job and cause; jobs.alerts.detect opens no overdue while failing or
#   stuck is open);
# - a continuous job's tenure recorded lost or failed once a newer tenure already holds the live
#   lease (a takeover records both in one statement) has its incident resolved by that tenure,
#   where before it stayed open for as long as the job ran healthily elsewhere.
# The function's text as installed here: migrations/sql/0034_run_outcome_alerts.sql (frozen).

from django.db import migrations

from jobs.database import postgres_only


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0033_cancel_audit'),
    ]

    operations = [
        migrations.RunPython(
            postgres_only.run_frozen_sql("0034_run_outcome_alerts.sql"),
            postgres_only.run_frozen_sql("0025_run_outcome_alerts.sql"),
        ),
    ]
