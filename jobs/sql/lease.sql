-- jobs_take_lease: the heart of guarantee 2 in the database's own functions, written once for
-- every lease they take (a job's, each of its max_concurrency slots, each rate limit slot): the
-- row is taken only when free or lapsed by the database clock, and its token goes up by one.
-- Returns the token and the expiry, or NULLs while another holds it. The rule is
-- jobs.guard.lease.TAKE_OVER_IF_LAPSED_PG (tests/integration/test_guarantee_sql.py compares them).

CREATE OR REPLACE FUNCTION jobs_take_lease(
    p_key text, p_holder text, p_ttl integer, OUT o_token bigint, OUT o_expires_at timestamptz
) LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobs_lease AS l (key, holder, token, acquired_at, expires_at)
    VALUES (p_key, p_holder, 1, now(), now() + make_interval(secs => p_ttl))
    ON CONFLICT (key) DO UPDATE
       SET holder = EXCLUDED.holder, token = l.token + 1, acquired_at = now(),
           expires_at = EXCLUDED.expires_at, stop_requested_by = ''
     WHERE l.expires_at <= now()
    RETURNING l.token, l.expires_at INTO o_token, o_expires_at;
END
$$;
