# Dependencies (jobs.dependencies): a job's upstreams, and the run it gets for a slot once every
# one of them succeeded for that slot (trigger 'upstream', one per job and slot), or the skipped
# record that says which upstream run failed, was lost, missed or skipped (and was not retried).
# One rule, a deferred constraint trigger on the run table, covers every way a run ends (the
# fenced and unleased finishes, lost runs, missed and calendar-skipped slots), in the transaction
# that ends it. Triggered jobs have no schedule of their own. The claim now counts a downstream
# run's start deadline from its creation, and tells the runner whether the job has downstreams
# (it then publishes the runs its finish made) and which upstream run made this one. The claim's
# text as installed here: migrations/sql/0022_claim_run.sql (frozen).

import django.db.models.deletion
from django.db import migrations, models

from jobs.database import postgres_only

RUN_SLOT = """
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
"""

FOLLOW = """
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
"""

DROP_CLAIM = "DROP FUNCTION IF EXISTS jobs_claim_run(bigint, text, integer, text, text, text[]);\n"

UNFOLLOW = """
DROP TRIGGER IF EXISTS jobs_follow_upstreams ON jobs_jobrun;
DROP FUNCTION IF EXISTS jobs_follow_upstreams();
DROP FUNCTION IF EXISTS jobs_run_slot(bigint);
"""


class Migration(migrations.Migration):

    dependencies = [
        ('django_celery_beat', '0019_alter_periodictasks_options'),
        ('jobs', '0021_calendars'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='job',
            name='continuous_job_has_no_beat_entry',
        ),
        migrations.AddField(
            model_name='job',
            name='upstreams',
            field=models.ManyToManyField(blank=True, help_text='Jobs this one runs after: once per slot for which every one of them succeeded (its own schedule, if any, still applies).', related_name='downstreams', to='jobs.job'),
        ),
        migrations.AddField(
            model_name='jobrun',
            name='upstream_run',
            field=models.ForeignKey(blank=True, db_index=False, help_text='The upstream run whose success (or failure) made this one.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='downstream_runs', to='jobs.jobrun'),
        ),
        migrations.AlterField(
            model_name='job',
            name='kind',
            field=models.CharField(choices=[('periodic', 'periodic'), ('continuous', 'continuous'), ('triggered', 'triggered')], default='periodic', max_length=16),
        ),
        migrations.AlterField(
            model_name='jobrun',
            name='trigger',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('manual', 'Manual'), ('api', 'Api'), ('continuous', 'Continuous'), ('retry', 'Retry'), ('call', 'Call'), ('backfill', 'Backfill'), ('upstream', 'Upstream')], db_default='scheduled', max_length=16),
        ),
        migrations.AddIndex(
            model_name='jobrun',
            index=models.Index(condition=models.Q(('upstream_run__isnull', False)), fields=['upstream_run'], name='jobrun_upstream_run'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('kind__in', ['continuous', 'triggered']), ('periodic_task__isnull', True)), ('kind', 'periodic'), _connector='OR'), name='continuous_job_has_no_beat_entry'),
        ),
        migrations.AddConstraint(
            model_name='jobrun',
            constraint=models.UniqueConstraint(condition=models.Q(('trigger', 'upstream')), fields=('job', 'scheduled_for'), name='one_run_per_upstream_slot'),
        ),
        migrations.RunPython(
            postgres_only.run_frozen_sql(
                "0022_claim_run.sql", first=RUN_SLOT + FOLLOW + DROP_CLAIM
            ),
            postgres_only.run_frozen_sql("0020_claim_run.sql", first=UNFOLLOW + DROP_CLAIM),
        ),
    ]
