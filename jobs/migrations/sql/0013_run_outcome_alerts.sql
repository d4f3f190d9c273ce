-- Frozen: jobs_run_outcome_alerts as migration 0013 installs it. Never edit:
-- the current text is jobs/sql/alerts.sql.
-- A run's outcome, at the commit of the transaction that recorded it.
CREATE OR REPLACE FUNCTION jobs_run_outcome_alerts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Judged as the run is at the commit: a later change of it has an event of its own.
    IF NOT EXISTS (SELECT 1 FROM jobs_jobrun WHERE id = NEW.id AND status = NEW.status) THEN
        RETURN NULL;
    END IF;
    IF NEW.status IN ('failed', 'missed', 'lost') THEN
        PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['stuck'], NEW.id);
        -- A retry recorded with this outcome decides instead (its own outcome will count).
        IF NOT EXISTS (SELECT 1 FROM jobs_jobrun WHERE retry_of_id = NEW.id) THEN
            PERFORM jobs_open_incident(NEW.job_id, 'failing', NEW.status, NEW.error, NEW.id);
        END IF;
    ELSIF NEW.status IN ('succeeded', 'running') THEN
        -- 'running': a continuous job's new tenure, its way of being healthy again.
        PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['failing', 'overdue', 'stuck'],
                                       NEW.id);
    ELSE
        PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['stuck'], NEW.id);
    END IF;
    RETURN NULL;
END
$$;
