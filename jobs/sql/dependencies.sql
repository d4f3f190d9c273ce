-- Dependencies (jobs.workflow.dependencies): when a run of a job with downstreams ends, in the
-- transaction that ended it, each downstream gets its run for that slot (every upstream
-- succeeded) or the skipped record that says which upstream run did not.

CREATE OR REPLACE FUNCTION jobs_run_slot(p_run_id bigint) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    -- The slot a run stands for: its own, or for a retry the first attempt's.
    WITH RECURSIVE chain(id, retry_of_id, scheduled_for, depth) AS (
        SELECT id, retry_of_id, scheduled_for, 0 FROM jobs_jobrun WHERE id = p_run_id
        UNION ALL
        SELECT r.id, r.retry_of_id, r.scheduled_for, c.depth + 1
          FROM jobs_jobrun AS r JOIN chain AS c ON r.id = c.retry_of_id
         WHERE c.depth < 1000
    )
    SELECT scheduled_for FROM chain ORDER BY depth DESC LIMIT 1
$$;

CREATE OR REPLACE FUNCTION jobs_follow_upstreams() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_slot timestamptz;
    v_name text;
BEGIN
    -- Only a job with downstreams costs more than this one index probe.
    IF NEW.trigger = 'continuous'
       OR NOT EXISTS (SELECT 1 FROM jobs_job_upstreams WHERE to_job_id = NEW.job_id) THEN
        RETURN NULL;
    END IF;
    v_slot := jobs_run_slot(NEW.id);
    IF NEW.status = 'succeeded' THEN
        -- Each downstream whose other upstreams all succeeded for this slot too (all-of).
        INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, upstream_run_id)
        SELECT d.from_job_id, v_slot, 'upstream', NEW.id
          FROM jobs_job_upstreams AS d JOIN jobs_job AS j ON j.id = d.from_job_id
         WHERE d.to_job_id = NEW.job_id AND j.enabled AND j.kind <> 'continuous'
           AND NOT EXISTS (
                SELECT 1 FROM jobs_job_upstreams AS o
                 WHERE o.from_job_id = d.from_job_id AND o.to_job_id <> NEW.job_id
                   AND NOT EXISTS (
                        SELECT 1 FROM jobs_jobrun AS u
                         WHERE u.job_id = o.to_job_id AND u.status = 'succeeded'
                           AND u.scheduled_for >= v_slot AND jobs_run_slot(u.id) = v_slot))
        ON CONFLICT (job_id, scheduled_for) WHERE trigger = 'upstream' DO NOTHING;
    ELSIF NOT EXISTS (SELECT 1 FROM jobs_jobrun AS n WHERE n.retry_of_id = NEW.id) THEN
        -- Ended otherwise, and no retry follows: the downstreams' record of that slot says so.
        SELECT name INTO v_name FROM jobs_job WHERE id = NEW.job_id;
        INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, upstream_run_id, status,
                                 finished_at, error)
        SELECT d.from_job_id, v_slot, 'upstream', NEW.id, 'skipped', now(),
               concat_ws(': ', format('upstream %s run %s %s', v_name, NEW.id, NEW.status),
                         nullif(left(NEW.error, 300), ''))
          FROM jobs_job_upstreams AS d JOIN jobs_job AS j ON j.id = d.from_job_id
         WHERE d.to_job_id = NEW.job_id AND j.enabled AND j.kind <> 'continuous'
        ON CONFLICT (job_id, scheduled_for) WHERE trigger = 'upstream' DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;

-- Deferred: at the end of the transaction that ended the run, when a retry it gets exists too.
CREATE CONSTRAINT TRIGGER jobs_follow_upstreams
    AFTER INSERT OR UPDATE OF status ON jobs_jobrun
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'lost', 'missed', 'skipped', 'cancelled'))
    EXECUTE FUNCTION jobs_follow_upstreams();
