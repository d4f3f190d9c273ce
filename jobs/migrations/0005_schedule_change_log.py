# The schedule change log (issue 3): a table, and the PostgreSQL triggers that append to it.

import django.db.models.functions.datetime
from django.db import migrations, models

from jobs.database import postgres_only

# Writers of the log take one transaction-scoped advisory lock before they append, so entries
# are committed in id order: a beat that has read entry N will never see an entry below N
# appear later. Job edits are rare, so serialising them costs nothing that matters.
LOCK_KEY = 7_727_274

CREATE = f"""
CREATE FUNCTION jobs_log_schedule_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({LOCK_KEY});
    IF TG_TABLE_NAME = 'jobs_job' THEN
        INSERT INTO jobs_schedulechange (job_id)
        VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END);
    ELSIF TG_TABLE_NAME = 'django_celery_beat_periodictask' THEN
        INSERT INTO jobs_schedulechange (job_id)
        SELECT id FROM jobs_job WHERE periodic_task_id = NEW.id;
    ELSE
        -- A schedule row (interval, crontab, clocked) that beat entries share: every job whose
        -- entry points at it changed. TG_ARGV[0] names the entry's column for this table.
        EXECUTE format('INSERT INTO jobs_schedulechange (job_id) '
                       'SELECT j.id FROM jobs_job AS j '
                       'JOIN django_celery_beat_periodictask AS t ON t.id = j.periodic_task_id '
                       'WHERE t.%I = $1', TG_ARGV[0]) USING NEW.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_job_added_or_removed AFTER INSERT OR DELETE ON jobs_job
    FOR EACH ROW EXECUTE FUNCTION jobs_log_schedule_change();
CREATE TRIGGER jobs_job_edited AFTER UPDATE ON jobs_job
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION jobs_log_schedule_change();
CREATE TRIGGER jobs_beat_entry_edited AFTER UPDATE ON django_celery_beat_periodictask
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) EXECUTE FUNCTION jobs_log_schedule_change();
CREATE TRIGGER jobs_interval_edited AFTER UPDATE ON django_celery_beat_intervalschedule
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION jobs_log_schedule_change('interval_id');
CREATE TRIGGER jobs_crontab_edited AFTER UPDATE ON django_celery_beat_crontabschedule
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION jobs_log_schedule_change('crontab_id');
CREATE TRIGGER jobs_clocked_edited AFTER UPDATE ON django_celery_beat_clockedschedule
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION jobs_log_schedule_change('clocked_id');
"""

DROP = """
DROP TRIGGER IF EXISTS jobs_clocked_edited ON django_celery_beat_clockedschedule;
DROP TRIGGER IF EXISTS jobs_crontab_edited ON django_celery_beat_crontabschedule;
DROP TRIGGER IF EXISTS jobs_interval_edited ON django_celery_beat_intervalschedule;
DROP TRIGGER IF EXISTS jobs_beat_entry_edited ON django_celery_beat_periodictask;
DROP TRIGGER IF EXISTS jobs_job_edited ON jobs_job;
DROP TRIGGER IF EXISTS jobs_job_added_or_removed ON jobs_job;
DROP FUNCTION IF EXISTS jobs_log_schedule_change();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('django_celery_beat', '0019_alter_periodictasks_options'),
        ('jobs', '0004_lease_stop_request'),
    ]

    operations = [
        migrations.CreateModel(
            name='ScheduleChange',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('job_id', models.BigIntegerField(help_text='The job edited (it may have been deleted since).')),
                ('changed_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), help_text='Database clock.')),
            ],
            options={
                'ordering': ['id'],
            },
        ),
        migrations.RunPython(postgres_only.run_sql(CREATE), postgres_only.run_sql(DROP)),
    ]
