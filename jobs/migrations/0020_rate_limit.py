# Rate limits: at most rate_limit_runs starts of a job in any rate_limit_period seconds. The claim
# takes one of rate_limit_runs leases named rate:NAME#1 … #N, each held for the period and never
# given back early, before the job's own lease; with none free the run is recorded skipped,
# saying when the next may start. A run skipped for its job's lease (overlap skip) gives its
# rate lease back, so only runs that start count.

import importlib

import django.core.validators
from django.db import migrations, models

from jobs import postgres_only

_0018 = importlib.import_module("jobs.migrations.0018_backfill")
_0019 = importlib.import_module("jobs.migrations.0019_max_concurrency")
_replaced = _0018._replaced

_RATE_BLOCK = """    END IF;

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
"""

CLAIM = _replaced(
    _replaced(
        _replaced(
            _replaced(
                _0019.CLAIM,
                "    v_try text;\n",
                "    v_try text;\n    v_rate_key text;\n    v_rate_token bigint;\n"
                "    v_rate_frees timestamptz;\n",
            ),
            "           j.priority, j.max_concurrency, jr.trigger, jr.released_at\n      INTO r",
            "           j.priority, j.max_concurrency, j.rate_limit_runs, j.rate_limit_period,\n"
            "           jr.trigger, jr.released_at\n      INTO r",
        ),
        "    ELSIF v_key IS NOT NULL THEN\n",
        _RATE_BLOCK,
    ),
    """                              coalesce(v_holder_token::text, '?'));
        END IF;
    END IF;
""",
    """                              coalesce(v_holder_token::text, '?'));
        END IF;
        IF v_status = 'skipped' AND v_rate_token IS NOT NULL THEN
            -- Skipped for the job's lease: it did not start, so it gives its rate lease back.
            UPDATE jobs_lease SET expires_at = now()
             WHERE key = v_rate_key AND token = v_rate_token;
        END IF;
    END IF;
""",
)


class Migration(migrations.Migration):

    dependencies = [
        ('django_celery_beat', '0019_alter_periodictasks_options'),
        ('jobs', '0019_max_concurrency'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='rate_limit_period',
            field=models.PositiveIntegerField(blank=True, help_text='The period of the rate limit, in seconds.', null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddField(
            model_name='job',
            name='rate_limit_runs',
            field=models.PositiveSmallIntegerField(blank=True, help_text='At most this many runs start per rate limit period (empty: no limit); a run over it is recorded skipped.', null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)]),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('rate_limit_period__isnull', True), ('rate_limit_runs__isnull', True)), models.Q(('rate_limit_period__isnull', False), ('rate_limit_runs__isnull', False)), _connector='OR'), name='rate_limit_has_runs_and_period'),
        ),
        migrations.RunPython(
            postgres_only.run_sql(CLAIM),
            postgres_only.run_sql(_0019.CLAIM),
        ),
    ]
