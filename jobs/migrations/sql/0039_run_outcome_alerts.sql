-- Frozen: jobs_run_outcome_alerts as migration 0039 installs it. Never edit:
-- the current text is jobs/sql/alerts.sql.
CREATE OR REPLACE FUNCTION jobs_run_outcome_alerts() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_open boolean;
    v_kind text := 'failing';
    v_newer bigint;
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
            PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['running_long', 'stuck'], NEW.id);
        END IF;
        -- A retry recorded with this outcome decides instead (its own outcome will count).
        IF NOT EXISTS (SELECT 1 FROM jobs_jobrun WHERE retry_of_id = NEW.id) THEN
            IF v_open AND EXISTS (SELECT 1 FROM jobs_incident AS i
                                   WHERE i.job_id = NEW.job_id AND i.kind = 'overdue'
                                     AND i.resolved_at IS NULL) THEN
                v_kind := 'overdue';
            END IF;
            PERFORM jobs_open_incident(NEW.job_id, v_kind, NEW.status, NEW.error, NEW.id);
        END IF;
        IF NEW.trigger = 'continuous' THEN
            -- The live lease's test as jobs.guard.lease.run_lease_live_pg words it.
            SELECT r.id INTO v_newer FROM jobs_jobrun AS r
             WHERE r.job_id = NEW.job_id AND r.trigger = 'continuous' AND r.status = 'running'
               AND r.fencing_token > NEW.fencing_token
               AND EXISTS (SELECT 1 FROM jobs_lease AS l
                            WHERE l.key = r.lease_key AND l.token = r.fencing_token
                              AND l.expires_at > now())
             ORDER BY r.fencing_token DESC LIMIT 1;
            IF v_newer IS NOT NULL THEN
                PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['failing'], v_newer);
            END IF;
        END IF;
    ELSIF NOT v_open THEN
        RETURN NULL;
    ELSIF NEW.status IN ('succeeded', 'running') THEN
        -- 'running': a continuous job's new tenure, its way of being healthy again.
        PERFORM jobs_resolve_incidents(
            NEW.job_id, ARRAY['failing', 'overdue', 'running_long', 'stuck'], NEW.id);
    ELSE
        PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['running_long', 'stuck'], NEW.id);
    END IF;
    RETURN NULL;
END
$$;
