-- Incidents are opened and resolved here only, so their notifications (jobs_alertdelivery, the
-- outbox) are written in the transaction that caused them (guarantee 8, "told once"): by the
-- run outcome triggers at the commit of whichever path recorded the outcome, and by the checks
-- of jobs.alerts.detect, which call jobs_open_incident / jobs_resolve_incidents.

-- The channels an incident of p_job_id opened for p_reason is notified on now: none while the
-- job is muted, alerts for none or other reasons; cluster incidents (no job) on every channel.
CREATE OR REPLACE FUNCTION jobs_alert_channels(p_job_id bigint, p_reason text)
RETURNS text[] LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_job_id IS NULL THEN ARRAY['webhook', 'email']
        WHEN j.id IS NULL OR j.alert_channels = 'none'
             OR coalesce(j.alerts_muted_until > now(), false)
             OR (j.alert_reasons NOT IN ('[]'::jsonb, 'null'::jsonb)
                 AND NOT j.alert_reasons ? p_reason) THEN ARRAY[]::text[]
        WHEN j.alert_channels = 'default' THEN ARRAY['webhook', 'email']
        ELSE ARRAY[j.alert_channels::text] END
      FROM (SELECT 1) AS one LEFT JOIN jobs_job AS j ON j.id = p_job_id
$$;

-- Opens the (job, kind) incident, or appends run p_run_id to the one open. Queues its
-- 'opened' notification once: when it opens, or when a later bad run finds it not notified
-- yet (it opened while the job was muted, or for a reason the job is not alerted for).
-- Returns the incident's id when this call opened it.
CREATE OR REPLACE FUNCTION jobs_open_incident(
    p_job_id bigint, p_kind text, p_reason text, p_summary text, p_run_id bigint
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_new boolean;
BEGIN
    INSERT INTO jobs_incident AS i (job_id, kind, reason, summary, first_run_id, last_run_id)
    VALUES (p_job_id, p_kind, p_reason, left(coalesce(p_summary, ''), 2000), p_run_id,
            p_run_id)
    ON CONFLICT (job_id, kind) WHERE resolved_at IS NULL DO UPDATE
       SET last_run_id = EXCLUDED.last_run_id, bad_runs = i.bad_runs + 1
     WHERE EXCLUDED.last_run_id IS NOT NULL
       AND EXCLUDED.last_run_id IS DISTINCT FROM i.last_run_id
    RETURNING i.id, i.xmax = 0 INTO v_id, v_new;
    IF v_id IS NULL THEN
        RETURN NULL;  -- open already, and nothing new to append
    END IF;
    IF v_new OR NOT EXISTS (SELECT 1 FROM jobs_alertdelivery
                             WHERE incident_id = v_id AND event = 'opened') THEN
        INSERT INTO jobs_alertdelivery (incident_id, event, channel)
        SELECT v_id, 'opened', c FROM unnest(jobs_alert_channels(p_job_id, p_reason)) AS c
        ON CONFLICT (incident_id, event, channel) DO NOTHING;
    END IF;
    RETURN CASE WHEN v_new THEN v_id END;
END
$$;

-- Resolves the open incidents of p_job_id (NULL: the cluster's) of the given kinds; a
-- running_long incident (or one recorded as 'stuck', its name before migration 0039) only by
-- its own run. Each one whose opening was notified gets its 'resolved'
-- notification on the same channels. Returns the ids resolved.
CREATE OR REPLACE FUNCTION jobs_resolve_incidents(
    p_job_id bigint, p_kinds text[], p_run_id bigint
) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    IF p_job_id IS NULL THEN
        WITH resolved AS (
            UPDATE jobs_incident SET resolved_at = now(), resolved_by_run_id = p_run_id
             WHERE job_id IS NULL AND kind = ANY (p_kinds) AND resolved_at IS NULL
            RETURNING id
        )
        SELECT array_agg(id) INTO v_ids FROM resolved;
    ELSE
        WITH resolved AS (
            UPDATE jobs_incident SET resolved_at = now(), resolved_by_run_id = p_run_id
             WHERE job_id = p_job_id AND kind = ANY (p_kinds) AND resolved_at IS NULL
               AND (kind NOT IN ('running_long', 'stuck') OR last_run_id = p_run_id)
            RETURNING id
        )
        SELECT array_agg(id) INTO v_ids FROM resolved;
    END IF;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO jobs_alertdelivery (incident_id, event, channel)
    SELECT d.incident_id, 'resolved', d.channel FROM jobs_alertdelivery AS d
     WHERE d.incident_id = ANY (v_ids) AND d.event = 'opened'
    ON CONFLICT (incident_id, event, channel) DO NOTHING;
    RETURN QUERY SELECT unnest(v_ids);
END
$$;

-- One incident per job and cause: a bad run joins the job's open 'overdue' incident (its
-- silence, found first) rather than opening 'failing' beside it; while 'failing' or
-- 'running_long' is open, jobs.alerts.detect opens no 'overdue'. A 'too_short' incident is
-- resolved by jobs.alerts.detect only, which alone knows whether a success was within the
-- job's baseline. A continuous job's tenure that ends lost or
-- failed once a newer tenure of the job already holds its live lease (taken over, or recorded
-- after the move) is no lasting incident: the job runs again, and that tenure resolves it.
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

CREATE CONSTRAINT TRIGGER jobs_run_outcome_alerts AFTER UPDATE OF status ON jobs_jobrun
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status NOT IN ('scheduled', 'running'))
    EXECUTE FUNCTION jobs_run_outcome_alerts();
CREATE CONSTRAINT TRIGGER jobs_run_recorded_alerts AFTER INSERT ON jobs_jobrun
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.status IN ('failed', 'missed', 'lost')
          OR (NEW.status = 'running' AND NEW.trigger = 'continuous'))
    EXECUTE FUNCTION jobs_run_outcome_alerts();
