-- Frozen: jobs_finish_run as migration 0015 installs it. Never edit:
-- the current text is jobs/sql/finish_run.sql.
CREATE OR REPLACE FUNCTION jobs_finish_run(
    p_run_id bigint, p_key text, p_token bigint, p_status text, p_error text,
    p_traceback text, p_result text, p_min_hold double precision,
    p_retry_delay double precision
) RETURNS TABLE (
    o_status text, o_retry_id bigint, o_retry_job_id bigint, o_retry_at timestamptz,
    o_released boolean
) LANGUAGE plpgsql AS $$
DECLARE
    v_live boolean;
    v_job_id bigint;
    v_attempt smallint;
    v_retry_of bigint;
    v_args jsonb;
    v_kwargs jsonb;
    v_status text;
    v_retry_id bigint;
    v_retry_at timestamptz;
BEGIN
    -- Guarantee 3: only the holder of the token, while its lease is live, gives it back
    -- (lease.RELEASE_EXPIRY_PG: kept until acquired_at + min_hold) and records its outcome.
    -- The row lock taken here keeps a taker out until this transaction ends.
    UPDATE jobs_lease AS l
       SET expires_at = GREATEST(now(), l.acquired_at + make_interval(secs => p_min_hold))
     WHERE l.key = p_key AND l.token = p_token AND l.expires_at > now();
    v_live := FOUND;

    UPDATE jobs_jobrun AS jr
       SET status = CASE WHEN v_live THEN p_status ELSE 'lost' END,
           error = CASE WHEN v_live THEN p_error
                        ELSE concat_ws(': ',
                               format('lease %s (token %s) lapsed or was taken over before '
                                      'the run ended; its outcome (%s) was discarded',
                                      p_key, p_token, p_status),
                               nullif(p_error, '')) END,
           finished_at = now(), traceback = p_traceback, result = p_result::jsonb
     WHERE jr.id = p_run_id AND jr.status = 'running' AND jr.fencing_token = p_token
    RETURNING jr.job_id, jr.attempt, jr.retry_of_id, jr.status, jr.args, jr.kwargs
         INTO v_job_id, v_attempt, v_retry_of, v_status, v_args, v_kwargs;

    -- The retry that is due, recorded with the outcome or not at all (records._RETRY_CTE):
    -- after an exception when the runner passes a delay; after a loss when the job says
    -- on_lost=retry, once (the re-run of a lost run is not re-run again).
    IF (v_status = 'failed' AND p_retry_delay IS NOT NULL)
       OR (v_status = 'lost'
           AND EXISTS (SELECT 1 FROM jobs_job AS j WHERE j.id = v_job_id AND j.on_lost = 'retry')
           AND NOT EXISTS (SELECT 1 FROM jobs_jobrun AS p
                            WHERE p.id = v_retry_of AND p.status = 'lost')) THEN
        INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, attempt, retry_of_id, args,
                                 kwargs)
        VALUES (v_job_id, now() + make_interval(secs => coalesce(p_retry_delay, 0)), 'retry',
                v_attempt + 1, p_run_id, v_args, v_kwargs)
        RETURNING id, scheduled_for INTO v_retry_id, v_retry_at;
    END IF;

    RETURN QUERY SELECT v_status, v_retry_id, CASE WHEN v_retry_id IS NULL THEN NULL
                                                    ELSE v_job_id END,
                        v_retry_at, v_live;
END
$$;
