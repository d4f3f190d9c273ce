-- Frozen: jobs_alert_channels, jobs_open_incident and jobs_resolve_incidents as migration
-- 0013 installs them. Never edit: the current text is jobs/sql/alerts.sql.
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

-- Resolves the open incidents of p_job_id (NULL: the cluster's) of the given kinds; a stuck
-- incident only by its own run. Each one whose opening was notified gets its 'resolved'
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
               AND (kind <> 'stuck' OR last_run_id = p_run_id)
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
