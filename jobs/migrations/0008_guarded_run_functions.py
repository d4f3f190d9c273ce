# A guarded run's two statements as PL/pgSQL functions (issue 4, throughput), and two fewer
# index entries for each run update.
#
# records.claim and records.finish_fenced were single statements of chained CTEs; the same work
# as functions costs the server about a sixth less CPU per run (measured in the closing note of
# issue 4): the executor no longer builds and evaluates every branch (late, skipped, retry) for
# each run, only the one taken. Still one round trip each, and still one transaction each.
# The lease rules are those of jobs/guard/lease.py (TAKE_OVER_IF_LAPSED_PG, RELEASE_EXPIRY_PG); the
# lease contract suite and the run tests hold both to the same behaviour.

import django.db.models.deletion
from django.db import migrations, models

from jobs import postgres_only

CLAIM = """
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
    SELECT jr.scheduled_for, jr.attempt, j.id AS job_id, j.name, j.task, j.args::text AS args,
           j.kwargs::text AS kwargs, j.overlap, j.start_deadline, j.on_lost, j.max_retries,
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
"""

FINISH = """
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
    RETURNING jr.job_id, jr.attempt, jr.retry_of_id, jr.status
         INTO v_job_id, v_attempt, v_retry_of, v_status;

    -- The retry that is due, recorded with the outcome or not at all (records._RETRY_CTE):
    -- after an exception when the runner passes a delay; after a loss when the job says
    -- on_lost=retry, once (the re-run of a lost run is not re-run again).
    IF (v_status = 'failed' AND p_retry_delay IS NOT NULL)
       OR (v_status = 'lost'
           AND EXISTS (SELECT 1 FROM jobs_job AS j WHERE j.id = v_job_id AND j.on_lost = 'retry')
           AND NOT EXISTS (SELECT 1 FROM jobs_jobrun AS p
                            WHERE p.id = v_retry_of AND p.status = 'lost')) THEN
        INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, attempt, retry_of_id)
        VALUES (v_job_id, now() + make_interval(secs => coalesce(p_retry_delay, 0)), 'retry',
                v_attempt + 1, p_run_id)
        RETURNING id, scheduled_for INTO v_retry_id, v_retry_at;
    END IF;

    RETURN QUERY SELECT v_status, v_retry_id, CASE WHEN v_retry_id IS NULL THEN NULL
                                                    ELSE v_job_id END,
                        v_retry_at, v_live;
END
$$;
"""

DROP = """
DROP FUNCTION IF EXISTS jobs_claim_run(bigint, text, integer, text, text, text[]);
DROP FUNCTION IF EXISTS jobs_finish_run(bigint, text, bigint, text, text, text, text,
                                        double precision, double precision);
"""


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0007_run_folded'),
    ]

    operations = [
        migrations.AlterField(
            model_name='jobrun',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='jobs.job'),
        ),
        migrations.AlterField(
            model_name='jobrun',
            name='retry_of',
            field=models.ForeignKey(blank=True, db_index=False, help_text='The run this one retries (after an exception or a lost node).', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='retries', to='jobs.jobrun'),
        ),
        migrations.AddIndex(
            model_name='jobrun',
            index=models.Index(condition=models.Q(('retry_of__isnull', False)), fields=['retry_of'], name='jobrun_retry_of'),
        ),
        migrations.RunPython(postgres_only.run_sql(CLAIM + FINISH), postgres_only.run_sql(DROP)),
    ]
