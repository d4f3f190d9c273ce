# Solar schedules carry over (jobs.schedule.solar): an edit of a SolarSchedule row that beat
# entries share is logged like an edit of an interval, crontab or clocked row, so every beat
# reschedules the jobs whose entry points at it within a tick.

from django.db import migrations

from jobs.database import postgres_only

CREATE = """
CREATE TRIGGER jobs_solar_edited AFTER UPDATE ON django_celery_beat_solarschedule
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION jobs_log_schedule_change('solar_id');
"""

DROP = "DROP TRIGGER IF EXISTS jobs_solar_edited ON django_celery_beat_solarschedule;"


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0015_call_runs"),
    ]

    operations = [
        migrations.RunPython(postgres_only.run_sql(CREATE), postgres_only.run_sql(DROP)),
    ]
