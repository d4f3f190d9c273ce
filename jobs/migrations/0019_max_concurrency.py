# Concurrency caps: a job's max_concurrency N gives its lock key N leases (key#1 … key#N, as
# jobs.guard.lease.slot_keys names them) instead of one. The claim function tries them in order
# and takes the first that is free or lapsed (each with its own fencing token); it skips a run
# (overlap skip) only when all N are held. It now also returns max_concurrency, so the runner
# knows how many keys to try for a key derived from arguments or under overlap wait.

import importlib

import django.core.validators
from django.db import migrations, models

from jobs import postgres_only

_0018 = importlib.import_module("jobs.migrations.0018_backfill")
_replaced = _0018._replaced

CLAIM = _replaced(
        _replaced(
            _replaced(
                _replaced(
                    _replaced(
                        _0018.CLAIM,
                        "    o_queue text, o_priority smallint, o_trigger text\n) LANGUAGE",
                        "    o_queue text, o_priority smallint, o_max_concurrency smallint,\n"
                        "    o_trigger text\n) LANGUAGE",
                    ),
                    "    v_deadline_from timestamptz;\n",
                    "    v_deadline_from timestamptz;\n    v_slot integer;\n    v_try text;\n",
                ),
                "           j.priority, jr.trigger, jr.released_at\n      INTO r",
                "           j.priority, j.max_concurrency, jr.trigger, jr.released_at\n      INTO r",
            ),
            """        -- lease.TAKE_OVER_IF_LAPSED_PG: free or lapsed by the database clock; token + 1.
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
        END IF;""",
            """        -- The job's max_concurrency leases (lease.slot_keys), the first free one taken.
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
        END IF;""",
        ),
        "r.time_limit, r.lease_ttl, r.min_hold, r.queue::text, r.priority, r.trigger::text;",
        "r.time_limit, r.lease_ttl, r.min_hold, r.queue::text, r.priority, r.max_concurrency,\n"
        "        r.trigger::text;",
)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0018_backfill'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='max_concurrency',
            field=models.PositiveSmallIntegerField(db_default=1, default=1, help_text='How many runs of this job (per lock key) may run at once; 1: a singleton.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)]),
        ),
        migrations.RunPython(
            postgres_only.run_sql(_0018.DROP_CLAIM + CLAIM),
            postgres_only.run_sql(_0018.DROP_CLAIM + _0018.CLAIM),
        ),
    ]
