-- Frozen: jobs_take_lease as migration 0031 installs it. Never edit:
-- the current text is jobs/sql/lease.sql.
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
