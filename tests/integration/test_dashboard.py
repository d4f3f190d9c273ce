"""The admin dashboard and the admin additions of issue 6, on a real database: the chart, lag
percentiles, the last day's problems, nodes, beats, continuous jobs, and the links to it and to
Flower."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from jobs.beat import heartbeat
from jobs.conf import get_ops_conf
from jobs.guard import lease
from jobs.models import Job, JobRun, Node, NodeState, RunStatus
from jobs.web import dashboard

pytestmark = pytest.mark.django_db

URL = reverse("jobs_dashboard")


def _runs(job: Job, statuses: list[RunStatus], minutes_ago: int, lag: float = 0.5) -> None:
    slot = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=minutes_ago)
    for offset, status in enumerate(statuses):
        started = slot + timedelta(seconds=offset + lag)
        JobRun.objects.create(
            job=job,
            scheduled_for=slot + timedelta(seconds=offset),
            status=status,
            started_at=started,
            finished_at=started + timedelta(seconds=1),
            node="w1@h",
            error="boom" if status == RunStatus.FAILED else "",
        )


def test_the_admin_index_links_the_dashboard(admin_client: Client) -> None:
    page = admin_client.get(reverse("admin:index")).content.decode()

    assert f'href="{URL}"' in page


def test_the_dashboard_needs_a_staff_login(client: Client) -> None:
    response = client.get(URL)

    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def _staff(*permissions: str) -> Client:
    user = User.objects.create_user("operator", password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=permissions))
    browser = Client()
    browser.force_login(user)
    return browser


def test_staff_without_the_job_view_permission_is_refused() -> None:
    browser = _staff("view_node")

    assert browser.get(URL).status_code == 403
    index = browser.get(reverse("admin:index")).content.decode()
    assert f'href="{URL}"' not in index


def test_the_job_view_permission_opens_the_dashboard() -> None:
    browser = _staff("view_job")

    assert browser.get(URL).status_code == 200
    assert f'href="{URL}"' in browser.get(reverse("admin:index")).content.decode()


def test_the_chart_stacks_runs_per_minute_by_status(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    job = make_job("report")
    _runs(job, [RunStatus.SUCCEEDED] * 3 + [RunStatus.FAILED], minutes_ago=5)
    _runs(job, [RunStatus.LOST], minutes_ago=30)
    _runs(job, [RunStatus.SUCCEEDED], minutes_ago=60 * 5)  # outside the default 3 h

    page = admin_client.get(URL).content.decode()

    start = page.index('<svg class="runs-chart"')
    chart = page[start : page.index("</svg>", start)]
    assert len(re.findall(r'<rect class="bar status-succeeded"', chart)) == 1
    assert "3 succeeded" in chart and "1 failed" in chart and "1 lost" in chart
    assert "succeeded: 3" in page and "failed: 1" in page  # the legend


def test_windows_and_buckets() -> None:
    now = timezone.now()
    for hours in dashboard.WINDOWS_HOURS:
        series = dashboard.runs_per_bucket(now, timedelta(hours=hours))
        assert series.buckets <= dashboard.MAX_BARS
        assert series.buckets * series.bucket == timedelta(hours=hours)


def _first_run_ago(make_job: Callable[..., Job], ago: timedelta) -> tuple[datetime, datetime]:
    """Now (15 s into a minute), and the slot of an install's first run, a whole minute ``ago``."""
    now = timezone.now().replace(second=15, microsecond=0)
    first = now.replace(second=0) - ago
    JobRun.objects.create(job=make_job("report"), scheduled_for=first)
    return now, first


def test_a_young_install_fills_the_chart_from_its_first_run(
    make_job: Callable[..., Job],
) -> None:
    now, first = _first_run_ago(make_job, timedelta(minutes=25))

    window = dashboard.chart_window(now, 3)
    series = dashboard.runs_per_bucket(now, window)

    # Up to the end of the current minute: 26 one-minute bars, the first run's in the first.
    assert window == timedelta(minutes=26)
    assert (series.start, series.buckets) == (first, 26)
    assert series.counts == {0: {"scheduled": 1}}


def test_a_young_install_s_page_says_its_window_and_draws_from_the_left(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    first = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=25)
    JobRun.objects.create(job=make_job("report"), scheduled_for=first)

    page = admin_client.get(URL).content.decode()  # the default window: 3 h

    assert re.search(r"by slot and status, last 2[67] min \(no run is older\)", page)
    chart = page[page.index('<svg class="runs-chart"') :]
    first_bar = re.search(r'<rect class="bar[^>]* x="([\d.]+)"', chart)
    assert first_bar is not None
    # At the left of the plot (it starts at x=40), not in the last 14 % of its width that
    # 25 minutes of 3 h would leave.
    assert float(first_bar.group(1)) < 100


def test_the_window_is_never_shorter_than_ten_minutes(make_job: Callable[..., Job]) -> None:
    now = timezone.now()
    JobRun.objects.create(job=make_job("report"), scheduled_for=now - timedelta(seconds=20))

    assert dashboard.chart_window(now, 3) == dashboard.MIN_WINDOW == timedelta(minutes=10)
    series = dashboard.runs_per_bucket(now, dashboard.MIN_WINDOW)
    assert (series.buckets, series.bucket) == (10, timedelta(minutes=1))


def test_an_install_older_than_the_window_gets_the_whole_window(
    make_job: Callable[..., Job],
) -> None:
    now, _ = _first_run_ago(make_job, timedelta(hours=5))

    assert dashboard.chart_window(now, 3) == timedelta(hours=3)
    assert dashboard.chart_window(now, 24) == timedelta(minutes=301)


@pytest.mark.parametrize(
    ("peak", "ticks"),
    [
        (1, [0, 1]),
        (3, [0, 1, 2, 3]),
        (5, [0, 1, 2, 3, 4, 5]),
        (7, [0, 2, 4, 6, 8]),
        (23, [0, 5, 10, 15, 20, 25]),
        (180, [0, 50, 100, 150, 200]),
        (999, [0, 200, 400, 600, 800, 1000]),
        (1001, [0, 500, 1000, 1500]),
    ],
)
def test_y_axis_ticks_are_round(peak: int, ticks: list[int]) -> None:
    assert dashboard.round_ticks(peak) == ticks


def test_the_chart_labels_its_y_axis_with_round_ticks(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    _runs(make_job("report"), [RunStatus.SUCCEEDED] * 7, minutes_ago=2)

    page = admin_client.get(URL).content.decode()

    labels = re.findall(r'<text class="y-tick"[^>]*>(\d+)</text>', page)
    assert labels == ["0", "2", "4", "6", "8"]


def test_a_bad_window_falls_back_to_the_default(admin_client: Client) -> None:
    for hours in ("7", "abc", "-1"):
        response = admin_client.get(URL, {"hours": hours})
        assert response.status_code == 200
        assert response.context["hours"] == dashboard.DEFAULT_HOURS


def test_lag_percentiles_and_problems(admin_client: Client, make_job: Callable[..., Job]) -> None:
    job = make_job("report")
    _runs(job, [RunStatus.SUCCEEDED] * 9, minutes_ago=10, lag=0.25)
    _runs(job, [RunStatus.FAILED, RunStatus.MISSED], minutes_ago=20, lag=4)

    response = admin_client.get(URL)

    total, per_job = response.context["lag"]
    assert total.job is None and per_job.job == "report"
    assert total.runs == 10  # the missed run never started its function
    assert total.p50 == pytest.approx(0.25) and total.max == pytest.approx(4)
    assert response.context["problem_counts"] == {"failed": 1, "missed": 1, "lost": 0}
    assert [run.status for run in response.context["problem_runs"]] == ["missed", "failed"]


def test_nodes_beats_and_continuous_jobs(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    now = timezone.now()
    Node.objects.create(name="w1@h", host="h", pid=1, started_at=now, last_heartbeat=now)
    Node.objects.create(
        name="w2@h", host="h", pid=2, started_at=now, last_heartbeat=now - timedelta(hours=1)
    )
    Node.objects.create(
        name="w3@h", host="h", pid=3, started_at=now, last_heartbeat=now, state=NodeState.STOPPED
    )
    recorder = heartbeat.BeatHeartbeatRecorder(interval=0)
    recorder.tick(0.002)
    poller = make_job("poller", schedule=None)
    JobRun.objects.create(
        job=poller, scheduled_for=now, status=RunStatus.RUNNING, node="w1@h", started_at=now
    )
    lease.acquire(poller.lock_key, "w1@h:1:poller", ttl=60)
    make_job("idle-poller", schedule=None)

    response = admin_client.get(URL)

    states = {row["node"].name: row["state"] for row in response.context["nodes"]}
    assert states == {"w1@h": "alive", "w2@h": "dead", "w3@h": "stopped"}
    assert [row["beat"].name for row in response.context["beats"]] == [recorder.name]
    continuous = {row["job"].name: row for row in response.context["continuous"]}
    assert continuous["poller"]["run"].node == "w1@h"
    assert continuous["poller"]["lease"].holder == "w1@h:1:poller"
    assert continuous["idle-poller"]["run"] is None
    assert "not running" in response.content.decode()


def test_query_count_does_not_grow_with_runs(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    job = make_job("report")
    _runs(job, [RunStatus.SUCCEEDED], minutes_ago=1)
    admin_client.get(URL)
    with CaptureQueriesContext(connection) as few:
        admin_client.get(URL)
    for minutes in range(2, 40):
        _runs(job, [RunStatus.SUCCEEDED, RunStatus.FAILED], minutes_ago=minutes)
    with CaptureQueriesContext(connection) as many:
        admin_client.get(URL)

    assert len(many) == len(few)


# --- admin additions ----------------------------------------------------------------------------


def test_job_list_shows_the_next_slot(admin_client: Client, make_job: Callable[..., Job]) -> None:
    make_job("report")

    response = admin_client.get(reverse("admin:jobs_job_changelist"))

    assert "next slot" in response.content.decode().lower()
    job = response.context["cl"].result_list[0]
    assert response.context["cl"].model_admin.next_slot(job) is not None


def test_runs_link_to_flower_when_configured(
    admin_client: Client, make_job: Callable[..., Job]
) -> None:
    run = JobRun.objects.create(job=make_job("report"), scheduled_for=timezone.now())
    with override_settings(FLOWER_URL="http://flower.example:5555/"):
        get_ops_conf.cache_clear()
        try:
            page = admin_client.get(reverse("admin:jobs_jobrun_change", args=[run.pk]))
        finally:
            get_ops_conf.cache_clear()

    assert f'href="http://flower.example:5555/task/jobrun-{run.pk}"' in page.content.decode()


def test_nodes_page_shows_liveness_and_leases(admin_client: Client) -> None:
    now = timezone.now()
    Node.objects.create(name="w1@h", host="h", pid=1, started_at=now, last_heartbeat=now)
    Node.objects.create(
        name="w2@h", host="h", pid=2, started_at=now, last_heartbeat=now - timedelta(hours=1)
    )
    lease.acquire("job:report", "w1@h:1:run-9", ttl=60)
    lease.acquire("job:other", "w1@hx:1:run-10", ttl=60)  # another node whose name starts alike

    response = admin_client.get(reverse("admin:jobs_node_changelist"))

    page = response.content.decode()
    assert "alive" in page and "dead" in page
    assert "job:report" in page and "job:other" not in page


def test_leases_page_shows_time_left(admin_client: Client) -> None:
    # A key of its own: a lease another test committed (acceptance processes do) under a
    # shared name would be held, and its time left shown instead.
    key = f"job:report-{uuid.uuid4().hex[:8]}"
    assert lease.acquire(key, "w1@h:1:run-9", ttl=60) is not None

    url = reverse("admin:jobs_lease_changelist")
    page = admin_client.get(url, {"q": key}).content.decode()

    assert key in page
    # The lease was taken at the test transaction's start, read at the page's statement: on a
    # loaded machine more than a second may lie between them.
    assert re.search(r"(5\d|60)\.\d s", page)
