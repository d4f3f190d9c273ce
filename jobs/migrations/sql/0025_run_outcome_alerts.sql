-- Frozen: jobs_run_outcome_alerts as migration 0025 installs it. Never edit:
-- the current text is jobs/sql/alerts.sql.
CREATE OR REPLACE FUNCTION jobs_run_outcome_alerts() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_open boolean;
BEGIN
    -- Judged as the run is at the commit: a later change of it has an event of its own. Read
    -- by the run's id alone (IS NOT DISTINCT FROM is no index condition), with whether its job
    -- has an open incident at all, so the usual run (a success, nothing open) costs one probe.
    SELECT jr.status, EXISTS (SELECT 1 FROM jobs_incident AS i
                               WHERE i.job_id = NEW.job_id AND i.resolved_at IS NULL)
      INTO v_status, v_open
      FROM jobs_jobrun AS jr WHERE jr.id = NEW.id;
    IF v_status IS DISTINCT FROM NEW.status THEN
        RETURN NULL;
    END IF;
    IF NEW.status IN ('failed', 'missed', 'lost') THEN
        IF v_open THEN
            PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['stuck'], NEW.id);
        END IF;
        -- A retry recorded with this outcome decides instead (its own outcome will count).
        IF NOT EXISTS (SELECT 1 FROM jobs_jobrun WHERE retry_of_id = NEW.id) THEN
            PERFORM jobs_open_incident(NEW.job_id, 'failing', NEW.status, NEW.error, NEW.id);
        END IF;
    ELSIF NOT v_open THEN
        RETURN NULL;
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
