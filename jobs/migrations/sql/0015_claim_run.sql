-- Frozen: jobs_claim_run as migration 0015 installs it. Never edit:
-- the current text is jobs/sql/claim_run.sql.
CREATE OR REPLACE FUNCTION jobs_claim_run(
    p_run_id bigint, p_node text, p_pid integer, p_task_id text, p_holder text,
    p_keyed_tasks text[]
) RETURNS TABLE (
    o_run_id bigint, o_scheduled_for timestamptz, o_attempt smallint, o_status text,
    o_error text, o_lease_key text, o_token bigint, o_expires_at timestamptz,
    o_job_id bigint, o_name text, o_task text, o_args text, o_kwargs text, o_overlap text,
    o_start_deadline integer, o_on_lost text, o_max_retries smallint, o_retry_backoff integer,
    o_soft_time_limit integer, o_time_limit integer, o_lease_ttl integer, o_min_hold integer,
    o_queue text, o_priority smallint
) LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_key text;
    v_token bigint;
    v_expires timestamptz;
    v_status text := 'running';
    v_error text := '';
    v_holder text;
    v_holder_token bigint;
BEGIN
    -- Scheduled -> running exactly once: a concurrent repeat waits on the row lock, then finds
    -- the run no longer scheduled and returns nothing.
    SELECT jr.scheduled_for, jr.attempt, j.id AS job_id, j.name, j.task, coalesce(jr.args, j.args)::text AS args,
           coalesce(jr.kwargs, j.kwargs)::text AS kwargs, j.overlap, j.start_deadline, j.on_lost, j.max_retries,
           j.retry_backoff, j.soft_time_limit, j.time_limit, j.lease_ttl, j.min_hold, j.queue,
           j.priority
      INTO r
      FROM jobs_jobrun AS jr JOIN jobs_job AS j ON j.id = jr.job_id
     WHERE jr.id = p_run_id AND jr.status = 'scheduled'
       FOR UPDATE OF jr;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    -- The job's own key (as Job.lock_key); a key derived from arguments is taken later.
    IF p_holder IS NOT NULL AND r.overlap <> 'allow'
       AND NOT coalesce(r.task = ANY(p_keyed_tasks), false) THEN
        v_key := 'job:' || r.name;
    END IF;

    IF now() > r.scheduled_for + make_interval(secs => r.start_deadline) THEN
        -- Past the start deadline by the database clock: recorded missed, never run late.
        v_status := 'missed';
        v_error := format('claimed %s s after its slot, past the start deadline of %s s',
                          round(extract(epoch FROM now() - r.scheduled_for)::numeric, 1),
                          r.start_deadline);
    ELSIF v_key IS NOT NULL THEN
        -- lease.TAKE_OVER_IF_LAPSED_PG: free or lapsed by the database clock; token + 1.
        INSERT INTO jobs_lease AS l (key, holder, token, acquired_at, expires_at)
        VALUES (v_key, p_holder, 1, now(), now() + make_interval(secs => r.lease_ttl))
        ON CONFLICT (key) DO UPDATE
           SET holder = EXCLUDED.holder, token = l.token + 1, acquired_at = now(),
               expires_at = EXCLUDED.expires_at, stop_requested_by = ''
         WHERE l.expires_at <= now()
        RETURNING l.token, l.expires_at INTO v_token, v_expires;
        IF v_token IS NULL AND r.overlap = 'skip' THEN
            SELECT l.holder, l.token INTO v_holder, v_holder_token
              FROM jobs_lease AS l WHERE l.key = v_key AND l.expires_at > now();
            v_status := 'skipped';
            v_error := format('lease %s held by %s (token %s)', v_key,
                              coalesce(v_holder, 'another run'),
                              coalesce(v_holder_token::text, '?'));
        END IF;
    END IF;

    UPDATE jobs_jobrun
       SET status = v_status, started_at = now(),
           finished_at = CASE WHEN v_status <> 'running' THEN now() END,
           error = v_error, node = p_node, pid = p_pid, task_id = p_task_id,
           fencing_token = v_token,
           lease_key = CASE WHEN v_token IS NULL THEN '' ELSE v_key END
     WHERE id = p_run_id;

    RETURN QUERY SELECT
        p_run_id, r.scheduled_for, r.attempt, v_status, v_error,
        CASE WHEN v_token IS NULL THEN NULL ELSE v_key END, v_token, v_expires,
        r.job_id, r.name::text, r.task::text, r.args, r.kwargs, r.overlap::text,
        r.start_deadline, r.on_lost::text, r.max_retries, r.retry_backoff, r.soft_time_limit,
        r.time_limit, r.lease_ttl, r.min_hold, r.queue::text, r.priority;
END
$$;
