-- Frozen: jobs_claim_run as migration 0031 installs it. Never edit:
-- the current text is jobs/sql/claim_run.sql.
CREATE OR REPLACE FUNCTION jobs_claim_run(
    p_run_id bigint, p_node text, p_pid integer, p_task_id text, p_holder text,
    p_keyed_tasks text[]
) RETURNS TABLE (
    o_run_id bigint, o_scheduled_for timestamptz, o_attempt smallint, o_status text,
    o_error text, o_lease_key text, o_token bigint, o_expires_at timestamptz, o_job_id bigint,
    o_name text, o_task text, o_args text, o_kwargs text, o_overlap text,
    o_start_deadline integer, o_on_lost text, o_max_retries smallint, o_retry_backoff integer,
    o_soft_time_limit integer, o_time_limit integer, o_lease_ttl integer, o_min_hold integer,
    o_queue text, o_priority smallint, o_max_concurrency smallint, o_trigger text,
    o_upstream_run_id bigint, o_has_downstreams boolean
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
    v_deadline_from timestamptz;
    v_slot integer;
    v_try text;
    v_rate_key text;
    v_rate_token bigint;
    v_rate_frees timestamptz;
BEGIN
    -- Scheduled -> running exactly once: a concurrent repeat waits on the row lock, then finds
    -- the run no longer scheduled and returns nothing. (By its id alone: IS NOT DISTINCT FROM
    -- is no index condition, so the planner cannot walk the status index instead.)
    SELECT jr.scheduled_for, jr.attempt, j.id AS job_id, j.name, j.task,
           coalesce(jr.args, j.args)::text AS args, coalesce(jr.kwargs, j.kwargs)::text AS kwargs,
           j.overlap, j.start_deadline, j.on_lost, j.max_retries, j.retry_backoff,
           j.soft_time_limit, j.time_limit, j.lease_ttl, j.min_hold, j.queue, j.priority,
           j.max_concurrency, j.rate_limit_runs, j.rate_limit_period, jr.trigger, jr.released_at,
           jr.created_at, jr.upstream_run_id,
           EXISTS (SELECT 1 FROM jobs_job_upstreams AS d WHERE d.to_job_id = j.id)
               AS has_downstreams
      INTO r
      FROM jobs_jobrun AS jr JOIN jobs_job AS j ON j.id = jr.job_id
     WHERE jr.id = p_run_id AND jr.status IS NOT DISTINCT FROM 'scheduled'
       FOR UPDATE OF jr;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    -- The job's own key (as Job.lock_key); a key derived from arguments is taken later.
    IF p_holder IS NOT NULL AND r.overlap <> 'allow'
       AND NOT coalesce(r.task = ANY(p_keyed_tasks), false) THEN
        v_key := 'job:' || r.name;
    END IF;

    -- run_records.deadline_from_pg: a backfill run's deadline counts from its release.
    v_deadline_from := CASE WHEN r.trigger = 'backfill' THEN r.released_at
                            WHEN r.trigger = 'upstream' THEN r.created_at
                            ELSE r.scheduled_for END;
    IF now() > v_deadline_from + make_interval(secs => r.start_deadline) THEN
        -- Past the start deadline by the database clock: recorded missed, never run late.
        v_status := 'missed';
        v_error := format('claimed %s s after its %s, past the start deadline of %s s',
                          round(extract(epoch FROM now() - v_deadline_from)::numeric, 1),
                          CASE WHEN r.trigger = 'backfill' THEN 'release' ELSE 'slot' END,
                          r.start_deadline);
    END IF;

    -- The rate limit: one of rate_limit_runs leases, each held for the period from this claim.
    IF v_status = 'running' AND r.rate_limit_runs IS NOT NULL THEN
        FOR v_slot IN 1..r.rate_limit_runs LOOP
            v_rate_key := 'rate:' || r.name || '#' || v_slot;
            SELECT t.o_token INTO v_rate_token
              FROM jobs_take_lease(v_rate_key, coalesce(p_holder, 'run ' || p_run_id),
                                   r.rate_limit_period) AS t;
            EXIT WHEN v_rate_token IS NOT NULL;
        END LOOP;
        IF v_rate_token IS NULL THEN
            SELECT min(l.expires_at) INTO v_rate_frees FROM jobs_lease AS l
             WHERE l.key = ANY(ARRAY(SELECT 'rate:' || r.name || '#' || g
                                       FROM generate_series(1, r.rate_limit_runs) AS g));
            v_status := 'skipped';
            v_error := format('rate limit: %s run(s) per %s s reached; the next may start at %s',
                              r.rate_limit_runs, r.rate_limit_period,
                              to_char(v_rate_frees AT TIME ZONE 'UTC',
                                      'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
        END IF;
    END IF;

    IF v_status = 'running' AND v_key IS NOT NULL THEN
        -- The job's max_concurrency leases (lease.slot_keys), the first free one taken.
        FOR v_slot IN 1..greatest(r.max_concurrency, 1) LOOP
            v_try := CASE WHEN r.max_concurrency > 1 THEN v_key || '#' || v_slot ELSE v_key END;
            SELECT t.o_token, t.o_expires_at INTO v_token, v_expires
              FROM jobs_take_lease(v_try, p_holder, r.lease_ttl) AS t;
            IF v_token IS NOT NULL THEN
                v_key := v_try;
                EXIT;
            END IF;
        END LOOP;
        IF v_token IS NULL AND r.overlap = 'skip' AND r.max_concurrency > 1 THEN
            v_status := 'skipped';
            v_error := format('all %s leases of %s held (max_concurrency %s)',
                              r.max_concurrency, v_key, r.max_concurrency);
        ELSIF v_token IS NULL AND r.overlap = 'skip' THEN
            SELECT l.holder, l.token INTO v_holder, v_holder_token
              FROM jobs_lease AS l WHERE l.key = v_key AND l.expires_at > now();
            v_status := 'skipped';
            v_error := format('lease %s held by %s (token %s)', v_key,
                              coalesce(v_holder, 'another run'),
                              coalesce(v_holder_token::text, '?'));
        END IF;
        IF v_status = 'skipped' AND v_rate_token IS NOT NULL THEN
            -- Skipped for the job's lease: it did not start, so it gives its rate lease back.
            UPDATE jobs_lease SET expires_at = now()
             WHERE key = v_rate_key AND token = v_rate_token;
        END IF;
    END IF;

    UPDATE jobs_jobrun
       SET status = v_status, started_at = now(),
           finished_at = CASE WHEN v_status <> 'running' THEN now() END,
           error = v_error, node = p_node, pid = p_pid, task_id = p_task_id,
           fencing_token = v_token,
           lease_key = CASE WHEN v_token IS NULL THEN '' ELSE v_key END
     WHERE id = p_run_id;

    -- One row, assigned rather than selected: no query to plan and start.
    o_run_id := p_run_id; o_scheduled_for := r.scheduled_for; o_attempt := r.attempt;
    o_status := v_status; o_error := v_error;
    o_lease_key := CASE WHEN v_token IS NULL THEN NULL ELSE v_key END;
    o_token := v_token; o_expires_at := v_expires; o_job_id := r.job_id; o_name := r.name;
    o_task := r.task; o_args := r.args; o_kwargs := r.kwargs; o_overlap := r.overlap;
    o_start_deadline := r.start_deadline; o_on_lost := r.on_lost;
    o_max_retries := r.max_retries; o_retry_backoff := r.retry_backoff;
    o_soft_time_limit := r.soft_time_limit; o_time_limit := r.time_limit;
    o_lease_ttl := r.lease_ttl; o_min_hold := r.min_hold; o_queue := r.queue;
    o_priority := r.priority; o_max_concurrency := r.max_concurrency; o_trigger := r.trigger;
    o_upstream_run_id := r.upstream_run_id; o_has_downstreams := r.has_downstreams;
    RETURN NEXT;
END
$$;
