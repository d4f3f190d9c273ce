"""Django 6's Tasks on real processes (``jobs.django_tasks``): a newsletter app's ``@task``
functions (tests/support/newsletter, written as Django's docs write them) enqueued from this
process and from the app's view, and run by two ``celery worker`` processes. One worker is
killed -9 in the middle of a task: its run is recorded lost and ``get_result()`` reports it
FAILED, while the other worker runs the rest; every outcome is read back through Django's API
(and the view) and the run records.

Django 5.2 has no ``django.tasks``: skipped there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django.tasks")

from django.tasks import TaskResultStatus, task_backends
from django.test import Client, override_settings

from jobs.models import Job, JobRun, RunStatus
from jobs.schedule.kinds import Every, Triggered
from jobs.upkeep.recovery import recover_lost_runs
from tests.acceptance.conftest import Cluster, pause_and_wait_for_beats, wait_for
from tests.support.job_factory import new_job
from tests.support.newsletter import tasks

pytestmark = pytest.mark.acceptance

START_TIMEOUT = 90
NEWSLETTER = {"JOBS_MODULES": "tests.support.newsletter.tasks"}
BEAT_ENV = {**NEWSLETTER, "JOBS_MAINTENANCE_INTERVAL": "0.5", "JOBS_REPUBLISH_AFTER": "2"}
# The test's own queue is not one settings allow: every queue is, in this process.
ANY_QUEUE = {"default": {"BACKEND": "jobs.django_tasks.backend.ClusterTaskBackend", "QUEUES": []}}


def _own_job(cluster: Cluster, task: Any) -> Job:
    """The task's own job, made ahead of the first enqueue as an operator would edit it: on the
    test's queue, with a short lease so that a dead worker's run lapses within seconds."""
    name = task.module_path
    return new_job(name, name, Triggered(), queue=cluster.queue, lease_ttl=3, start_deadline=120)


def _run_id(result: Any) -> int:
    return int(result.id.removeprefix("jobrun-"))


@override_settings(TASKS=ANY_QUEUE, ROOT_URLCONF="tests.support.newsletter.urls")
def test_a_task_on_a_worker_killed_mid_run_is_failed_and_the_others_succeed(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.start_worker("worker-a", env=NEWSLETTER)
    cluster.start_worker("worker-b", env=NEWSLETTER)
    cluster.wait_ready("worker-a", "worker-b", timeout=START_TIMEOUT)
    _own_job(cluster, tasks.render_issue)
    _own_job(cluster, tasks.count_words)

    doomed = tasks.render_issue.using(queue_name=cluster.queue).enqueue(
        7, proofs=str(tmp_path / "never")
    )

    def holding() -> JobRun | None:
        return JobRun.objects.filter(
            pk=_run_id(doomed), status=RunStatus.RUNNING, fencing_token__isnull=False
        ).first()

    wait_for(lambda: holding() is not None, timeout=60, what="render_issue holding its lease")
    doomed.refresh()
    assert doomed.status == TaskResultStatus.RUNNING
    run = holding()
    assert run is not None
    holder, survivor = (
        ("worker-a", "worker-b") if run.node.startswith("worker-a@") else ("worker-b", "worker-a")
    )
    cluster.kill(holder)  # SIGKILL, the whole process group, mid-task

    def lost() -> bool:
        recover_lost_runs()  # maintenance's pass
        doomed.refresh()
        return doomed.status != TaskResultStatus.RUNNING

    wait_for(lost, timeout=60, what="the killed worker's run recorded lost")
    assert doomed.status == TaskResultStatus.FAILED
    [error] = doomed.errors
    assert error.exception_class_path == "jobs.exceptions.RunLost"
    assert "lapsed" in error.traceback
    assert doomed.worker_ids == [run.node]
    with pytest.raises(ValueError, match="failed"):
        doomed.return_value  # noqa: B018  (Django's property raises for a failed task)

    # The survivor takes the rest, each enqueue run once: enqueued by the newsletter's view.
    texts = [" ".join(["word"] * n) for n in range(1, 6)]
    client = Client()
    posted = [
        client.post("/newsletter/count", {"text": text, "queue": cluster.queue}) for text in texts
    ]
    assert [(answer.status_code, answer.json()["status"]) for answer in posted] == [
        (202, TaskResultStatus.READY)
    ] * 5
    results = [tasks.count_words.get_result(answer.json()["id"]) for answer in posted]

    def finished() -> bool:
        for result in results:
            result.refresh()
        return all(result.is_finished for result in results)

    wait_for(finished, timeout=60, what="the five count_words runs finished")
    assert [result.status for result in results] == [TaskResultStatus.SUCCESSFUL] * 5
    assert [result.return_value["words"] for result in results] == [1, 2, 3, 4, 5]
    pages = [client.get(f"/newsletter/counted/{result.id}").json() for result in results]
    assert pages == [{"status": "SUCCESSFUL", "words": n} for n in range(1, 6)]
    assert {node.split("@")[0] for result in results for node in result.worker_ids} == {survivor}
    counted = JobRun.objects.filter(job__name=tasks.count_words.module_path)
    assert sorted(counted.values_list("status", flat=True)) == [RunStatus.SUCCEEDED] * 5
    assert JobRun.objects.get(pk=_run_id(doomed)).status == RunStatus.LOST
    assert JobRun.objects.count() == 6, "one run per enqueue, none retried (on_lost=abandon)"


def test_a_task_as_a_jobs_task_runs_each_slot_once_through_the_beat(cluster: Cluster) -> None:
    cluster.start_worker("worker-a", env=NEWSLETTER)
    cluster.start_beat("beat-a", env=BEAT_ENV)
    cluster.start_beat("beat-b", env=BEAT_ENV)
    cluster.wait_ready("worker-a", "beat-a", "beat-b", timeout=START_TIMEOUT)
    name = tasks.count_words.module_path
    job = new_job(
        "word-count", name, Every(2), kwargs={"text": "one two three"}, queue=cluster.queue
    )
    succeeded = JobRun.objects.filter(job=job, status=RunStatus.SUCCEEDED)
    wait_for(lambda: succeeded.count() >= 3, timeout=60, what="three slots of word-count ran")
    pause_and_wait_for_beats(cluster, ["beat-a", "beat-b"], [job.name])
    pending = (RunStatus.SCHEDULED, RunStatus.RUNNING)
    wait_for(
        lambda: not JobRun.objects.filter(job=job, status__in=pending).exists(),
        timeout=30,
        what="every run of word-count finished",
    )
    runs = list(JobRun.objects.filter(job=job).order_by("scheduled_for"))
    slots = [run.scheduled_for for run in runs]
    assert slots == sorted(set(slots)), "one run per slot, two beats firing"
    assert {(run.status, run.trigger, run.lease_key) for run in runs} == {
        (RunStatus.SUCCEEDED, "scheduled", "job:word-count")
    }
    assert {run.result["words"] for run in runs} == {3}  # type: ignore[index]
    # Django's API reads a scheduled run as it reads an enqueued one.
    result = task_backends["default"].get_result(f"jobrun-{runs[0].pk}")
    assert (result.status, result.return_value["words"]) == (TaskResultStatus.SUCCESSFUL, 3)
    assert "Task word-count[jobrun-" in cluster.log_of("worker-a")
