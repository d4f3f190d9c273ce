-- The cluster version (jobs_cluster_version, one row, created by migration 0023): bumped by any
-- write a supervision snapshot shows (jobs.continuous.supervisor), so a supervisor reads the
-- whole snapshot only when it moved. Renewals and heartbeats leave it alone, and a run's lease
-- (holder "node:pid:run-N") pays only the triggers' WHEN test.

CREATE OR REPLACE FUNCTION jobs_bump_cluster_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs_cluster_version SET version = version + 1 WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_cluster_jobs_changed AFTER INSERT OR UPDATE OR DELETE ON jobs_job
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_bump_cluster_version();

CREATE TRIGGER jobs_cluster_lease_taken AFTER INSERT ON jobs_lease
    FOR EACH ROW WHEN (NEW.holder LIKE '%:continuous')
    EXECUTE FUNCTION jobs_bump_cluster_version();
-- A takeover (the token or holder changes) or a hand-back and release (the expiry moves
-- earlier); a renewal moves it later.
CREATE TRIGGER jobs_cluster_lease_moved AFTER UPDATE ON jobs_lease
    FOR EACH ROW WHEN ((NEW.holder LIKE '%:continuous' OR OLD.holder LIKE '%:continuous')
                       AND (NEW.token IS DISTINCT FROM OLD.token
                            OR NEW.holder IS DISTINCT FROM OLD.holder
                            OR NEW.expires_at < OLD.expires_at))
    EXECUTE FUNCTION jobs_bump_cluster_version();
CREATE TRIGGER jobs_cluster_lease_deleted AFTER DELETE ON jobs_lease
    FOR EACH ROW WHEN (OLD.holder LIKE '%:continuous')
    EXECUTE FUNCTION jobs_bump_cluster_version();

CREATE TRIGGER jobs_cluster_node_added_or_removed AFTER INSERT OR DELETE ON jobs_node
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_bump_cluster_version();
-- A heartbeat changes none of these, unless it comes after a gap in which the node may have
-- counted as dead (3 missed heartbeats; 2 to be safe).
CREATE TRIGGER jobs_cluster_node_changed AFTER UPDATE ON jobs_node
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state
                       OR NEW.pid IS DISTINCT FROM OLD.pid
                       OR NEW.queues IS DISTINCT FROM OLD.queues
                       OR NEW.heartbeat_interval IS DISTINCT FROM OLD.heartbeat_interval
                       OR NEW.last_heartbeat
                          > OLD.last_heartbeat + make_interval(secs => 2 * OLD.heartbeat_interval))
    EXECUTE FUNCTION jobs_bump_cluster_version();
