-- Frozen: jobs_resolve_incidents as migration 0039 installs it. Never edit:
-- the current text is jobs/sql/alerts.sql.
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
