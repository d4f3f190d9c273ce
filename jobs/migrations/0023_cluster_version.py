# The cluster version (jobs.continuous.supervisor): one number that changes whenever something a
# supervision snapshot shows changes by a write — a job added, edited or removed; a continuous
# job's lease taken, taken over, handed back or released; a node joining, leaving, changing its
# queues or coming back after missing heartbeats. Renewals and heartbeats, the frequent writes,
# leave it alone: what they change (when a lease lapses, when a node counts as dead) each
# supervisor already knows from its last snapshot and wakes for. So a supervisor reads the one
# row every second and the whole snapshot only when the version moved or a deadline it knows
# of came. A run's lease (holder "node:pid:run-N") never touches it: the guarded-run path pays
# only the trigger's WHEN test.

from django.db import migrations

from jobs.database import postgres_only

CREATE = """
CREATE TABLE jobs_cluster_version (
    id smallint PRIMARY KEY CHECK (id = 1),
    version bigint NOT NULL
);
INSERT INTO jobs_cluster_version (id, version) VALUES (1, 0);

CREATE FUNCTION jobs_bump_cluster_version() RETURNS trigger LANGUAGE plpgsql AS $$
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
"""

DROP = """
DROP TRIGGER IF EXISTS jobs_cluster_node_changed ON jobs_node;
DROP TRIGGER IF EXISTS jobs_cluster_node_added_or_removed ON jobs_node;
DROP TRIGGER IF EXISTS jobs_cluster_lease_deleted ON jobs_lease;
DROP TRIGGER IF EXISTS jobs_cluster_lease_moved ON jobs_lease;
DROP TRIGGER IF EXISTS jobs_cluster_lease_taken ON jobs_lease;
DROP TRIGGER IF EXISTS jobs_cluster_jobs_changed ON jobs_job;
DROP FUNCTION IF EXISTS jobs_bump_cluster_version();
DROP TABLE IF EXISTS jobs_cluster_version;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0022_dependencies'),
    ]

    operations = [
        migrations.RunPython(postgres_only.run_sql(CREATE), postgres_only.run_sql(DROP)),
    ]
