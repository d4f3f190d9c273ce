"""The admin's pages as an operator sees them, in headless Chromium at 1366 px wide: the job list
keeps the lease holder in view and marks a paused job, the job page shows the next slot and the
live holder, the form shows only the chosen schedule kind's fields (and saves), a run is titled
by job and slot with seconds, the Nodes filter's dead and alive, and a young install's chart.

No worker or beat here: the rows are written as the cluster would, and the pages read them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Locator, Page, expect

import tests.support.jobs_under_test  # noqa: F401  (registers tests.record)
from jobs import services
from jobs.audit import Actor
from jobs.guard import lease
from jobs.models import Job, JobRun, Node, RunStatus
from jobs.schedule.kinds import Cron, Every
from tests.browser.conftest import VIEWPORT, shot
from tests.support.job_factory import new_job

pytestmark = pytest.mark.browser

INSTANT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
TESTS = Actor.code("tests")
# A holder as long as real ones get: node name, pid, run id (jobs.guard.runner).
HOLDER = "celery@worker-node-07.eu-west-1.compute.internal:1234567:run-9876543"
NOWHERE = "/dev/null"  # the jobs never run here


@pytest.fixture
def jobs_of_a_busy_cluster() -> Iterator[dict[str, Job]]:
    """Long names, a cron job in a zone, a paused job, runs, and a live lease."""
    jobs = {
        "billing": new_job(
            "nightly-billing-reconciliation-eu-west", schedule=Every(seconds=10), log=NOWHERE
        ),
        "cron": new_job(
            "warehouse-export-weekdays",
            schedule=Cron(expr="30 2 * * 1-5", tz="Europe/Paris"),
            log=NOWHERE,
        ),
        "paused": new_job("legacy-report-mailer", schedule=Every(seconds=10), log=NOWHERE),
        "poller": new_job("inventory-feed-poller", schedule=None, log=NOWHERE),  # continuous
    }
    services.set_enabled(jobs["paused"], False, actor=TESTS)
    # Three runs each, 10 s apart, all in the minute before this one (one bar of the chart).
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    for job in jobs.values():
        for seconds in (10, 20, 30):
            slot = minute + timedelta(seconds=seconds)
            JobRun.objects.create(
                job=job,
                scheduled_for=slot,
                status=RunStatus.SUCCEEDED,
                started_at=slot + timedelta(seconds=0.2),
                finished_at=slot + timedelta(seconds=1.5),
                node="celery@worker-node-07.eu-west-1.compute.internal",
            )
    assert lease.acquire(jobs["billing"].lock_key, HOLDER, ttl=600) is not None
    yield jobs


# Nothing wider than the screen, nothing scrolled out of view in the list's results box.
NOTHING_SCROLLED_OUT = """() => {
    const results = document.querySelector("#changelist .results");
    return document.documentElement.scrollWidth <= window.innerWidth
        && results.scrollWidth <= results.clientWidth;
}"""


def _right_edge(locator: Locator) -> float:
    box = locator.bounding_box()
    assert box is not None, "not rendered"
    return box["x"] + box["width"]


def test_the_job_list_fits_1366_px_with_the_lease_holder_and_a_paused_badge(
    operator: Page, jobs_of_a_busy_cluster: dict[str, Job]
) -> None:
    page = operator
    page.goto("/admin/jobs/job/")
    shot(page, "job-list-1366")

    holder = page.locator("td.field-lease", has_text=HOLDER)
    expect(holder).to_be_visible()
    expect(holder).to_contain_text(f"{HOLDER} #1")
    for cell in [page.locator("th.column-lease"), *page.locator("td.field-lease").all()]:
        assert _right_edge(cell) <= VIEWPORT["width"]
    assert page.evaluate(NOTHING_SCROLLED_OUT), "the job list is wider than the screen"

    paused_row = page.locator("#result_list tr", has_text="legacy-report-mailer")
    badge = paused_row.locator(".job-paused")
    expect(badge).to_be_visible()
    expect(badge).to_have_text(re.compile("paused", re.I))
    assert page.locator("#result_list .job-paused").count() == 1
    running_row = page.locator("#result_list tr", has_text="nightly-billing")
    tint = "el => getComputedStyle(el.querySelector('td')).backgroundColor"
    assert paused_row.evaluate(tint) != running_row.evaluate(tint)

    last_slot = running_row.locator("td.field-last_run").inner_text().splitlines()
    assert last_slot[0] == "succeeded" and INSTANT.match(last_slot[1]), last_slot
    assert INSTANT.match(running_row.locator("td.field-next_slot").inner_text())


def test_the_job_page_shows_the_next_slot_and_the_live_holder(
    operator: Page, jobs_of_a_busy_cluster: dict[str, Job]
) -> None:
    page = operator
    page.goto(f"/admin/jobs/job/{jobs_of_a_busy_cluster['billing'].pk}/change/")
    shot(page, "job-page")

    expect(page.locator(".field-next_slot .readonly")).to_have_text(INSTANT)
    expect(page.locator(".field-lease .readonly")).to_have_text(f"{HOLDER} #1")
    # The recent runs read with seconds, each titled by its job and slot.
    runs = page.locator(".inline-group", has_text="recent runs")
    expect(runs.locator("td.original p").first).to_contain_text("nightly-billing-reconciliation")
    slots = runs.locator("td.field-scheduled_for").all_inner_texts()
    assert len(slots) == 3 and all(INSTANT.match(slot) for slot in slots), slots
    assert len(set(slots)) == 3  # ten seconds apart, three different times


SCHEDULE_ROWS = ("every", "cron", "timezone", "run_at", "after")


def _shown_schedule_rows(page: Page) -> set[str]:
    return {name for name in SCHEDULE_ROWS if page.locator(f".form-row.field-{name}").is_visible()}


def test_the_form_shows_only_the_chosen_schedule_kind_s_fields(operator: Page) -> None:
    page = operator
    page.goto("/admin/jobs/job/add/")

    assert _shown_schedule_rows(page) == {"every", "after"}  # interval, the default
    shot(page, "form-interval")
    expected = {
        "cron": {"cron", "timezone", "after"},
        "one_off": {"run_at", "after"},
        "continuous": set(),  # always runs: after no other job
        "triggered": {"after"},
        "interval": {"every", "after"},
    }
    for kind, rows in expected.items():
        page.check(f"input[name=schedule_type][value={kind}]")
        assert _shown_schedule_rows(page) == rows, kind
        shot(page, f"form-{kind}")

    # The hidden fields do not get in the way of saving the shown ones.
    page.fill("#id_name", "weekday-export")
    page.select_option("#id_task", "tests.record")
    page.fill("#id_every", "5m")  # typed, then the operator changed their mind
    page.check("input[name=schedule_type][value=cron]")
    page.fill("#id_cron", "30 2 * * 1-5")
    page.fill("#id_timezone", "Europe/Paris")
    page.fill("#id_kwargs", '{"log": "/dev/null"}')
    page.click("input[name=_continue]")
    expect(page.locator("ul.messagelist")).to_contain_text("weekday-export")

    # Its page opens on the cron fields.
    assert _shown_schedule_rows(page) == {"cron", "timezone", "after"}
    expect(page.locator("#id_cron")).to_have_value("30 2 * * 1-5")
    entry = Job.objects.get(name="weekday-export").periodic_task
    assert entry is not None
    crontab = entry.crontab
    assert (crontab.minute, crontab.hour, str(crontab.timezone)) == ("30", "2", "Europe/Paris")


def test_a_run_page_is_titled_by_job_and_slot_with_seconds(
    operator: Page, jobs_of_a_busy_cluster: dict[str, Job]
) -> None:
    page = operator
    run = JobRun.objects.filter(job=jobs_of_a_busy_cluster["cron"]).first()
    assert run is not None
    page.goto(f"/admin/jobs/jobrun/{run.pk}/change/")
    shot(page, "run-page")

    title = f"warehouse-export-weekdays @ {run.scheduled_for:%Y-%m-%d %H:%M:%S} UTC"
    expect(page.locator("#content h2").first).to_have_text(title)
    expect(page.locator(".breadcrumbs")).to_contain_text(title)
    for field in ("started_at", "finished_at", "created_at"):
        expect(page.locator(f".field-{field} .readonly")).to_have_text(INSTANT)


def test_the_nodes_filter_tells_dead_from_alive(operator: Page) -> None:
    page = operator
    now = timezone.now()
    Node.objects.create(name="alive@h", host="h", pid=1, started_at=now, last_heartbeat=now)
    # Killed without a clean shutdown: its stored state still says alive.
    Node.objects.create(
        name="dead@h", host="h", pid=2, started_at=now, last_heartbeat=now - timedelta(hours=1)
    )
    page.goto("/admin/jobs/node/")

    page.click("#changelist-filter a:text-is('dead')")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list tbody")).to_contain_text("dead@h")
    shot(page, "nodes-dead")
    page.click("#changelist-filter a:text-is('alive')")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list tbody")).to_contain_text("alive@h")
    # Every column in view at 1366 px, the leases a node holds the last.
    assert _right_edge(page.locator("th.column-holds")) <= VIEWPORT["width"]
    assert page.evaluate(NOTHING_SCROLLED_OUT), "the node list is wider than the screen"


def test_a_young_install_s_chart_starts_at_its_first_run(
    operator: Page, jobs_of_a_busy_cluster: dict[str, Job]
) -> None:
    page = operator
    page.goto(reverse("jobs_dashboard"))
    shot(page, "dashboard-young")

    expect(page.locator("#content")).to_contain_text("last 10 min (no run is older)")
    chart = page.locator("svg.runs-chart")
    first_bar = page.locator("svg.runs-chart rect.bar").first
    chart_box, bar_box = chart.bounding_box(), first_bar.bounding_box()
    assert chart_box is not None and bar_box is not None
    # Ten one-minute bars across the plot, not a sliver at the right edge of 3 h.
    assert bar_box["width"] > chart_box["width"] / 20
    ticks = page.locator("svg.runs-chart text.y-tick").all_text_contents()
    assert ticks == ["0", "5", "10", "15"], ticks  # 12 runs in one minute (4 jobs, 3 each)
