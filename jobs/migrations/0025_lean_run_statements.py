# The guarded run's statements, leaner (bench/lease_bench.py; each found with pgbench and perf on
# the server):
# - A run is looked up by its id alone, its status tested with IS NOT DISTINCT FROM (which is no
#   index condition): with `status = 'scheduled'` the planner may walk the status index instead of
#   the primary key whenever it believes few runs have that status (an empty or fresh table, or
#   statistics taken in a quiet hour), and then every claim of a burst, every finish and the
#   alerts trigger at each commit read all the runs of that status: O(runs) each.
# - The claim and finish return their row by assigning it (no query to start), the claim reads
#   whether the job has downstreams in its first statement, and the finish decides on a retry
#   with plain expressions unless the run was lost.
# - The alerts trigger reads the run and whether its job has any open incident in one probe, and
#   calls the incident functions only when there is something to open or resolve.

import importlib

from django.db import migrations

from jobs import postgres_only

_0013 = importlib.import_module("jobs.migrations.0013_alerts")
_0015 = importlib.import_module("jobs.migrations.0015_call_runs")
_0022 = importlib.import_module("jobs.migrations.0022_dependencies")

CLAIM = """
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
            INSERT INTO jobs_lease AS l (key, holder, token, acquired_at, expires_at)
            VALUES (v_rate_key, coalesce(p_holder, 'run ' || p_run_id), 1, now(),
                    now() + make_interval(secs => r.rate_limit_period))
            ON CONFLICT (key) DO UPDATE
               SET holder = EXCLUDED.holder, token = l.token + 1, acquired_at = now(),
                   expires_at = EXCLUDED.expires_at, stop_requested_by = ''
             WHERE l.expires_at <= now()
            RETURNING l.token INTO v_rate_token;
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
            -- lease.TAKE_OVER_IF_LAPSED_PG: free or lapsed by the database clock; token + 1.
            INSERT INTO jobs_lease AS l (key, holder, token, acquired_at, expires_at)
            VALUES (v_try, p_holder, 1, now(), now() + make_interval(secs => r.lease_ttl))
            ON CONFLICT (key) DO UPDATE
               SET holder = EXCLUDED.holder, token = l.token + 1, acquired_at = now(),
                   expires_at = EXCLUDED.expires_at, stop_requested_by = ''
             WHERE l.expires_at <= now()
            RETURNING l.token, l.expires_at INTO v_token, v_expires;
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
"""

FINISH = """
CREATE OR REPLACE FUNCTION jobs_finish_run(
    p_run_id bigint, p_key text, p_token bigint, p_status text, p_error text,
    p_traceback text, p_result text, p_min_hold double precision,
    p_retry_delay double precision
) RETURNS TABLE (o_status text, o_retry_id bigint, o_retry_job_id bigint,
                 o_retry_at timestamptz, o_released boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_live boolean;
    v_job_id bigint;
    v_attempt smallint;
    v_retry_of bigint;
    v_args jsonb;
    v_kwargs jsonb;
    v_status text;
    v_retry boolean := false;
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

    -- By the run's id alone (IS NOT DISTINCT FROM is no index condition, as in the claim).
    UPDATE jobs_jobrun AS jr
       SET status = CASE WHEN v_live THEN p_status ELSE 'lost' END,
           error = CASE WHEN v_live THEN p_error
                        ELSE concat_ws(': ',
                               format('lease %s (token %s) lapsed or was taken over before '
                                      'the run ended; its outcome (%s) was discarded',
                                      p_key, p_token, p_status),
                               nullif(p_error, '')) END,
           finished_at = now(), traceback = p_traceback, result = p_result::jsonb
     WHERE jr.id = p_run_id
       AND jr.status IS NOT DISTINCT FROM 'running' AND jr.fencing_token = p_token
    RETURNING jr.job_id, jr.attempt, jr.retry_of_id, jr.status, jr.args, jr.kwargs
         INTO v_job_id, v_attempt, v_retry_of, v_status, v_args, v_kwargs;

    -- The retry that is due, recorded with the outcome or not at all (records._RETRY_CTE):
    -- after an exception when the runner passes a delay; after a loss when the job says
    -- on_lost=retry, once (the re-run of a lost run is not re-run again).
    IF v_status = 'failed' THEN
        v_retry := p_retry_delay IS NOT NULL;
    ELSIF v_status = 'lost' THEN
        v_retry := EXISTS (SELECT 1 FROM jobs_job AS j WHERE j.id = v_job_id AND j.on_lost = 'retry')
           AND NOT EXISTS (SELECT 1 FROM jobs_jobrun AS p
                            WHERE p.id = v_retry_of AND p.status = 'lost');
    END IF;
    IF v_retry THEN
        INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, attempt, retry_of_id, args,
                                 kwargs)
        VALUES (v_job_id, now() + make_interval(secs => coalesce(p_retry_delay, 0)), 'retry',
                v_attempt + 1, p_run_id, v_args, v_kwargs)
        RETURNING id, scheduled_for INTO v_retry_id, v_retry_at;
    END IF;

    o_status := v_status; o_retry_id := v_retry_id;
    o_retry_job_id := CASE WHEN v_retry_id IS NULL THEN NULL ELSE v_job_id END;
    o_retry_at := v_retry_at; o_released := v_live;
    RETURN NEXT;
END
$$;
"""

ALERTS = """
CREATE OR REPLACE FUNCTION jobs_run_outcome_alerts() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_open boolean;
BEGIN
    -- Judged as the run is at the commit: a later change of it has an event of its own. Read
    -- by the run's id alone (IS NOT DISTINCT FROM is no index condition), with whether its job
    -- has an open incident at all, so the usual run (a success, nothing open) costs one probe.
    SELECT jr.status, EXISTS (SELECT 1 FROM jobs_incident AS i
                               WHERE i.job_id = NEW.job_id AND i.resolved_at IS NULL)
      INTO v_status, v_open
      FROM jobs_jobrun AS jr WHERE jr.id = NEW.id;
    IF v_status IS DISTINCT FROM NEW.status THEN
        RETURN NULL;
    END IF;
    IF NEW.status IN ('failed', 'missed', 'lost') THEN
        IF v_open THEN
            PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['stuck'], NEW.id);
        END IF;
        -- A retry recorded with this outcome decides instead (its own outcome will count).
        IF NOT EXISTS (SELECT 1 FROM jobs_jobrun WHERE retry_of_id = NEW.id) THEN
            PERFORM jobs_open_incident(NEW.job_id, 'failing', NEW.status, NEW.error, NEW.id);
        END IF;
    ELSIF NOT v_open THEN
        RETURN NULL;
    ELSIF NEW.status IN ('succeeded', 'running') THEN
        -- 'running': a continuous job's new tenure, its way of being healthy again.
        PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['failing', 'overdue', 'stuck'],
                                       NEW.id);
    ELSE
        PERFORM jobs_resolve_incidents(NEW.job_id, ARRAY['stuck'], NEW.id);
    END IF;
    RETURN NULL;
END
$$;
"""

# The alerts trigger's function as migration 0013 wrote it (for the reverse).
ALERTS_BEFORE = _0013.FUNCTIONS[
    _0013.FUNCTIONS.index("CREATE OR REPLACE FUNCTION jobs_run_outcome_alerts()") :
    _0013.FUNCTIONS.index("CREATE CONSTRAINT TRIGGER jobs_run_outcome_alerts")
]


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0024_job_failures_index'),
    ]

    operations = [
        migrations.RunPython(
            postgres_only.run_sql(CLAIM + FINISH + ALERTS),
            postgres_only.run_sql(_0022.CLAIM + _0015.FINISH + ALERTS_BEFORE),
        ),
    ]
