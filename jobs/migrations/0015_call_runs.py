# Runs of ad-hoc calls of guarded tasks (jobs.calls): trigger 'call', and the call's own args and
# kwargs on the run (NULL for every other run: the job's). The claim function now returns the
# run's arguments when it has its own, so the runner calls (and derives a lock key from) the
# call's; the finish function copies them onto a retry, as records._RETRY_CTE does.

import importlib

from django.db import migrations, models

from jobs import postgres_only

_0008 = importlib.import_module("jobs.migrations.0008_guarded_run_functions")


def _replaced(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


CLAIM = _replaced(
    _0008.CLAIM,
    "j.args::text AS args,\n           j.kwargs::text AS kwargs,",
    "coalesce(jr.args, j.args)::text AS args,\n"
    "           coalesce(jr.kwargs, j.kwargs)::text AS kwargs,",
)
FINISH = _replaced(
    _replaced(
        _replaced(
            _0008.FINISH,
            "    v_retry_of bigint;\n",
            "    v_retry_of bigint;\n    v_args jsonb;\n    v_kwargs jsonb;\n",
        ),
        "RETURNING jr.job_id, jr.attempt, jr.retry_of_id, jr.status\n"
        "         INTO v_job_id, v_attempt, v_retry_of, v_status;",
        "RETURNING jr.job_id, jr.attempt, jr.retry_of_id, jr.status, jr.args, jr.kwargs\n"
        "         INTO v_job_id, v_attempt, v_retry_of, v_status, v_args, v_kwargs;",
    ),
    "INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, attempt, retry_of_id)\n"
    "        VALUES (v_job_id, now() + make_interval(secs => coalesce(p_retry_delay, 0)), 'retry',\n"
    "                v_attempt + 1, p_run_id)",
    "INSERT INTO jobs_jobrun (job_id, scheduled_for, trigger, attempt, retry_of_id, args,\n"
    "                                 kwargs)\n"
    "        VALUES (v_job_id, now() + make_interval(secs => coalesce(p_retry_delay, 0)), 'retry',\n"
    "                v_attempt + 1, p_run_id, v_args, v_kwargs)",
)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0014_adoption'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobrun',
            name='args',
            field=models.JSONField(blank=True, help_text="The arguments of this call (empty: the job's).", null=True),
        ),
        migrations.AddField(
            model_name='jobrun',
            name='kwargs',
            field=models.JSONField(blank=True, help_text="The keyword arguments of this call (empty: the job's).", null=True),
        ),
        migrations.AlterField(
            model_name='jobrun',
            name='trigger',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('manual', 'Manual'), ('api', 'Api'), ('continuous', 'Continuous'), ('retry', 'Retry'), ('call', 'Call')], db_default='scheduled', max_length=16),
        ),
        migrations.RunPython(
            postgres_only.run_sql(CLAIM + FINISH),
            postgres_only.run_sql(_0008.CLAIM + _0008.FINISH),
        ),
    ]
