-- The schedule change log (jobs_schedulechange, read by every beat): a job added, edited or
-- removed, a beat entry added or edited, or a schedule row that beat entries share edited.
-- Writers take one transaction-scoped advisory lock (7727274) before they append, so entries
-- are committed in id order: a beat that has read entry N never sees one below N appear later.
-- An entry that no job owns is logged by its own id, so beats adopt it within a tick.

CREATE OR REPLACE FUNCTION jobs_log_schedule_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7727274);
    IF TG_TABLE_NAME = 'jobs_job' THEN
        INSERT INTO jobs_schedulechange (job_id)
        VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END);
    ELSIF TG_TABLE_NAME = 'django_celery_beat_periodictask' THEN
        INSERT INTO jobs_schedulechange (job_id)
        SELECT id FROM jobs_job WHERE periodic_task_id = NEW.id;
        IF NOT FOUND THEN
            INSERT INTO jobs_schedulechange (periodic_task_id) VALUES (NEW.id);
        END IF;
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

CREATE TRIGGER jobs_beat_entry_added AFTER INSERT ON django_celery_beat_periodictask
    FOR EACH ROW EXECUTE FUNCTION jobs_log_schedule_change();

CREATE TRIGGER jobs_solar_edited AFTER UPDATE ON django_celery_beat_solarschedule
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION jobs_log_schedule_change('solar_id');
