"""Every page of the jobs admin on a 1366 by 768 laptop screen (conftest.VIEWPORT), with data in
every table (long job, node and holder names, failed and lost runs, audit entries of every size,
incidents): no column of a list, no field of a form, no label of the chart lies outside the
screen or is scrolled out of its box (issue 29). The pages are found from the admin's own
registry, so a new model's list and page are checked without anyone adding them here.

No worker or beat here: the rows are written as the cluster would, and the pages read them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.db.models import Model
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

import tests.support.jobs_under_test  # noqa: F401  (registers tests.record)
from jobs import registry, services
from jobs.alerts.detect import open_incident
from jobs.audit import Actor
from jobs.guard import lease
from jobs.models import (
    AlertDelivery,
    AuditAction,
    AuditEntry,
    BeatHeartbeat,
    Incident,
    JobRun,
    Node,
    RunStatus,
    Trigger,
)
from jobs.schedule.kinds import Cron, Every, Triggered
from jobs.web import tokens
from tests.browser.conftest import VIEWPORT, shot
from tests.support.job_factory import new_job

pytestmark = pytest.mark.browser

TESTS = Actor.code("tests")
# Names as long as real ones get: node name, pid, run id (jobs.guard.runner).
NODE = "celery@worker-node-07.eu-west-1.compute.internal"
HOLDER = f"{NODE}:1234567:run-9876543"
ERROR = (
    "ConnectionError: HTTPSConnectionPool(host='payments.example.com', port=443): Max retries "
    "exceeded with url: /v2/settlements?date=2030-01-01&currency=EUR&page=17"
)

# The viewport's width, scrolled-out boxes included: for each element, the part of the page it
# may occupy is the screen cut by every ancestor that clips what overflows it (a list's results
# box scrolls sideways, the chart's SVG clips its labels). An element not rendered (a hidden
# schedule field, a closed fieldset) has an empty box and is not looked at.
OUT_OF_VIEW = """(selectors) => {
    const describe = (el) => {
        const classes = (el.getAttribute("class") || "").trim().split(/\\s+/).filter(Boolean);
        const cls = classes.map((name) => "." + name).join("");
        const text = (el.innerText || el.textContent || el.value || "").trim().slice(0, 40);
        return `${el.tagName.toLowerCase()}${cls} "${text}"`;
    };
    const problems = [];
    const seen = new Set();  // one line per column or kind of field
    const page = document.documentElement;
    if (page.scrollWidth > window.innerWidth) {
        problems.push(`the page is ${page.scrollWidth} px wide`);
    }
    for (const el of document.querySelectorAll(selectors)) {
        const box = el.getBoundingClientRect();
        if (box.width === 0 && box.height === 0) continue;
        let left = 0, right = page.clientWidth;
        for (let up = el.parentElement; up; up = up.parentElement) {
            if (getComputedStyle(up).overflowX === "visible") continue;
            const clip = up.getBoundingClientRect();
            left = Math.max(left, clip.left + up.clientLeft);
            right = Math.min(right, clip.left + up.clientLeft + (up.clientWidth || clip.width));
        }
        if (box.left < left - 1 || box.right > right + 1) {
            const spans = `${Math.round(box.left)}-${Math.round(box.right)} px`;
            const shown = `${Math.round(left)}-${Math.round(right)} px`;
            const what = describe(el);
            if (!seen.has(what.split(" ")[0])) {
                problems.push(`${what} spans ${spans}, in view ${shown}`);
            }
            seen.add(what.split(" ")[0]);
        }
    }
    return problems;
}"""
# What each kind of page must keep in view: the columns of its lists (the changelist, the inlines,
# the dashboard's tables), the fields of its forms and the chart's labels.
LIST_PARTS = "#result_list th, #result_list td, .inline-group th, .inline-group td, table.dash td"
FORM_PARTS = (
    ".form-row label, .form-row input:not([type=hidden]), .form-row select, .form-row textarea, "
    ".form-row .readonly, .submit-row input"
)
CHART_PARTS = "svg.runs-chart text"
# A list row taller than this (a fifth of the screen) buries the rows after it.
TALLEST_ROW = VIEWPORT["height"] / 5


def _long_log(name: str) -> str:
    return f"/var/lib/jobs/{name}/{'x' * 120}.log"


@pytest.fixture
def busy_cluster() -> Iterator[dict[str, Model]]:
    """A row in every table the admin shows, as long as real ones get."""
    name = "nightly-billing-reconciliation-eu-west-with-a-long-name"
    billing = new_job(name, schedule=Every(seconds=10), log=_long_log(name))
    name = "warehouse-export-weekdays"
    cron = new_job(name, schedule=Cron(expr="30 2 * * 1-5", tz="Europe/Paris"), log=_long_log(name))
    name = "inventory-feed-poller-of-the-eu-west-warehouses"
    new_job(name, schedule=None, log=_long_log(name))  # continuous
    name = "ledger-close-after-billing"
    new_job(name, schedule=Triggered(), after=[billing.name], log=_long_log(name))
    services.set_enabled(cron, False, actor=TESTS)
    services.mute(billing.name, timezone.now() + timedelta(hours=2), actor=TESTS)
    now = timezone.now().replace(microsecond=0)
    runs = {}
    for minutes, status in enumerate(RunStatus, start=1):
        slot = now - timedelta(minutes=minutes)
        started = status not in (RunStatus.SCHEDULED, RunStatus.MISSED, RunStatus.SKIPPED)
        ended = started and status != RunStatus.RUNNING
        runs[status] = JobRun.objects.create(
            job=billing,
            scheduled_for=slot,
            status=status,
            trigger=Trigger.SCHEDULED if minutes % 2 else Trigger.MANUAL,
            attempt=2 if status == RunStatus.FAILED else 1,
            fencing_token=123456 + minutes if started else None,
            node=NODE if started else "",
            pid=1234567 if started else None,
            started_at=slot + timedelta(seconds=0.35) if started else None,
            finished_at=slot + timedelta(seconds=40.5) if ended else None,
            error=ERROR if status in (RunStatus.FAILED, RunStatus.LOST) else "",
            traceback="Traceback (most recent call last):\n" + "  File 'x.py'\n" * 30 + ERROR,
        )
    assert lease.acquire(billing.lock_key, HOLDER, ttl=600) is not None
    Node.objects.create(
        name=NODE,
        host="worker-node-07.eu-west-1.compute.internal",
        pid=1234567,
        queues=["default", "reports-eu-west", "billing-eu-west"],
        started_at=now,
        last_heartbeat=now,
    )
    BeatHeartbeat.objects.create(
        name="beat-host-eu-west-1.compute.internal:7654321",
        host="beat-host-eu-west-1.compute.internal",
        pid=7654321,
        started_at=now,
        last_seen=now,
        ticks=100,
        tick_seconds=1.5,
    )
    open_incident(billing.pk, "failing", "failed", ERROR, runs[RunStatus.FAILED].pk)
    open_incident(None, "no_beat", "no_beat", "no live beat for 120 s: every beat is down")
    incident = Incident.objects.filter(job=billing).first()
    assert incident is not None
    if not AlertDelivery.objects.exists():
        AlertDelivery.objects.create(
            incident=incident, event="opened", channel="webhook", last_error=ERROR
        )
    services.add_blackout(
        "quarter-end-freeze-of-the-billing-systems",
        now + timedelta(days=1),
        now + timedelta(days=2),
        actor=TESTS,
        job_name=billing.name,
        description="No billing run while finance closes the quarter. " * 3,
    )
    tokens.create("ci-pipeline-of-the-billing-team-eu-west", actor=TESTS, read_only=True)
    added = AuditEntry.objects.filter(action=AuditAction.ADD).first()
    assert added is not None
    yield {
        "job": billing,
        "jobrun": runs[RunStatus.FAILED],
        "auditentry": added,
        "incident": incident,
    }


def _pages(rows: dict[str, Model]) -> list[tuple[str, str]]:
    """Every list and page of the jobs admin (one row of each model: the fullest), its add
    pages, the job's own forms and the dashboard."""
    pages = []
    for model, model_admin in admin.site._registry.items():
        opts = model._meta
        if opts.app_label != "jobs":
            continue
        name = str(opts.model_name)
        pages.append((f"{name}-list", reverse(f"admin:jobs_{name}_changelist")))
        row = rows.get(name) or model._default_manager.first()
        assert row is not None, f"no {name} row to show"
        pages.append((f"{name}-page", reverse(f"admin:jobs_{name}_change", args=[row.pk])))
        if model_admin.has_add_permission(_superuser_request()):
            pages.append((f"{name}-add", reverse(f"admin:jobs_{name}_add")))
    job = rows["job"].pk
    pages.append(("job-backfill", reverse("admin:jobs_job_backfill", args=[job])))
    pages.append(("job-run", reverse("admin:jobs_job_run", args=[job])))
    pages.append(("dashboard", reverse("jobs_dashboard")))
    return pages


def _superuser_request() -> Any:
    class Request:
        user = User.objects.get(username="operator")

    return Request()


def test_every_list_form_and_chart_of_the_admin_fits_a_1366_px_screen(
    operator: Page, busy_cluster: dict[str, Model]
) -> None:
    page = operator
    problems = []
    for name, url in _pages(busy_cluster):
        page.goto(url)
        assert page.locator("#content").count() == 1, f"{name}: {url} did not render"
        shot(page, f"fit-{name}")
        found = page.evaluate(OUT_OF_VIEW, f"{LIST_PARTS}, {FORM_PARTS}, {CHART_PARTS}")
        tall = page.evaluate(
            "(most) => [...document.querySelectorAll('#result_list tbody tr')]"
            ".map(row => row.getBoundingClientRect().height).filter(height => height > most)",
            TALLEST_ROW,
        )
        found += [f"a row {height:.0f} px tall" for height in tall]
        problems += [f"{name} ({url}): {problem}" for problem in found]
    assert not problems, "\n".join(problems)


def test_the_audit_list_shows_a_compact_diff_and_the_entry_page_the_full_values(
    operator: Page, busy_cluster: dict[str, Model]
) -> None:
    page = operator
    page.goto(reverse("admin:jobs_auditentry_changelist"))
    added = busy_cluster["auditentry"]
    assert isinstance(added, AuditEntry) and added.after is not None
    row = page.locator("#result_list tr", has=page.locator(f"a[href*='/{added.pk}/change/']"))
    changes = row.locator("td.field-changes").inner_text()
    # The changed keys with short values, not 30 fields of JSON.
    assert changes.startswith("name: ") and re.search(r"and \d+ more$", changes), changes
    assert "x" * 120 not in changes
    page.goto(reverse("admin:jobs_auditentry_change", args=[added.pk]))
    expect(page.locator(".field-after_block")).to_contain_text("x" * 120)


def test_the_backfill_page_is_an_admin_form_that_says_how_to_write_the_times(
    operator: Page, busy_cluster: dict[str, Model]
) -> None:
    page = operator
    page.goto(reverse("admin:jobs_job_backfill", args=[busy_cluster["job"].pk]))
    shot(page, "backfill")
    # The admin's aligned form: every label in one column, every field in the next (the dry
    # run's checkbox, as the admin's, before its label).
    lefts = page.evaluate(
        """() => [...document.querySelectorAll("fieldset .form-row:not(.field-dry_run)")]
            .map(row => [
                row.querySelector("label").getBoundingClientRect().left,
                row.querySelector("input").getBoundingClientRect().left,
                row.querySelector("label").getBoundingClientRect().width,
            ])"""
    )
    assert len(lefts) == 3 and len({left for left, _, _ in lefts}) == 1, lefts
    assert len({field for _, field, _ in lefts}) == 1, lefts
    assert all(width >= 150 for _, _, width in lefts), lefts  # the admin's label column
    for name in ("since", "until"):
        expect(page.locator(f".field-{name} .help")).to_contain_text("2030-01-01 09:00")
        expect(page.locator(f".field-{name} .help")).to_contain_text("UTC")


# Where each line of an element's text starts: the offsets (in its text) of the characters that
# begin a new line, measured from the rendered characters' boxes. A character cut off by an
# ellipsis still has its box on its line, so a token cut short counts as on one line.
LINE_STARTS = """(cell) => {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let text = "", top = null;
    const starts = [];
    while (walker.nextNode()) {
        const node = walker.currentNode;
        for (let i = 0; i < node.length; i++) {
            const range = document.createRange();
            range.setStart(node, i);
            range.setEnd(node, i + 1);
            const box = range.getClientRects()[0];
            if (box && node.data[i].trim()) {
                if (top !== null && box.top > top + 2) starts.push(text.length);
                top = box.top;
            }
            text += node.data[i];
        }
    }
    return {text, starts};
}"""
# Every element of a cell whose text is cut short (an ellipsis), with the title that says it whole.
CUT_SHORT = """(cell) => [...cell.querySelectorAll("*")]
    .filter((el) => el.scrollWidth > el.clientWidth + 1)
    .map((el) => [el.textContent.trim(), el.closest("[title]")?.title ?? ""])"""
# The width of the chosen option's text in the select's font, and the room the closed select
# has for it: its inner width less the arrow (which Chromium draws inside the right padding).
CHOSEN_TEXT_AND_ROOM = """(select) => {
    const style = getComputedStyle(select);
    const context = document.createElement("canvas").getContext("2d");
    context.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    const text = context.measureText(select.selectedOptions[0].text).width;
    const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
    return [text, select.clientWidth - padding];
}"""
# A holder as the user saw it wrapped: "worker2@vm:3018" over "7:continuous #2".
SHORT_HOLDER = "worker2@vm:30187:continuous"
LONG_TASK = "tests.support.plain_tasks.request_headers"


def _lines(cell: Any) -> tuple[str, list[str]]:
    found = cell.evaluate(LINE_STARTS)
    text, starts = found["text"], found["starts"]
    bounds = [0, *starts, len(text)]
    return text, [text[a:b] for a, b in itertools.pairwise(bounds)]


def _cut_without_title(cell: Any) -> list[str]:
    return [f"{shown!r} (title {title!r})" for shown, title in cell.evaluate(CUT_SHORT)
            if shown.rstrip("…").strip() not in title]  # fmt: skip


def test_the_job_list_wraps_lease_holders_and_tasks_between_whole_tokens_only(
    operator: Page, busy_cluster: dict[str, Model]
) -> None:
    """Issue 41: at 1366 px a holder wrapped inside its pid and a task name at its dots. Lines
    may break between a holder's node, pid, run and token; a task name stays on one line; what
    a column cannot hold ends in an ellipsis, the whole text in a title."""
    import tests.support.plain_tasks  # noqa: F401  (a long dotted task name)

    poller = new_job("inventory-feed-7", task=LONG_TASK, log=_long_log("inventory-feed-7"))
    assert lease.acquire(poller.lock_key, SHORT_HOLDER, ttl=600) is not None
    page = operator
    page.goto(reverse("admin:jobs_job_changelist"))
    shot(page, "job-list-whole-tokens")
    problems = []
    for row in page.locator("#result_list tbody tr").all():
        problems += _holder_problems(row.locator("td.field-lease"))
        task_text, lines = _lines(row.locator("td.field-task_name"))
        if len(lines) > 1:
            problems.append(f"the task {task_text!r} wraps: {lines}")
        problems += _cut_without_title(row.locator("td.field-task_name"))
    holders = page.locator("td.field-lease").all_inner_texts()
    assert f"{SHORT_HOLDER} #1" in [" ".join(h.split()) for h in holders], holders
    # The lease list shows the same holders the same way.
    page.goto(reverse("admin:jobs_lease_changelist"))
    shot(page, "lease-list-whole-tokens")
    for cell in page.locator("#result_list td.field-holder_tokens").all():
        problems += _holder_problems(cell)
    assert not problems, "\n".join(problems)


def _holder_problems(cell: Any) -> list[str]:
    """A holder may wrap between tokens only: after its "node:" or "pid:", or at the space
    before its "#token"."""
    text, lines = _lines(cell)
    problems = _cut_without_title(cell)
    if any(not line.endswith((":", " ")) for line in lines[:-1]):
        problems.append(f"the holder {text!r} wraps inside a token: {lines}")
    return problems


def test_the_job_page_task_chooser_fits_the_screen_with_every_task_registered(
    operator: Page, busy_cluster: dict[str, Model]
) -> None:
    """Issue 41: with a long task name and summary chosen, the chooser showed them cut at its
    right edge. The chosen task reads whole in the closed select, on the screen, and its summary
    whole under it."""
    import tests.support.plain_tasks  # noqa: F401

    job = new_job("inventory-feed-7", task=LONG_TASK, log=_long_log("inventory-feed-7"))
    page = operator
    page.goto(reverse("admin:jobs_job_change", args=[job.pk]))
    shot(page, "job-page-task-chooser")
    assert page.evaluate(OUT_OF_VIEW, "#id_task, .field-task .help") == []
    chooser = page.locator("#id_task")
    assert LONG_TASK in chooser.evaluate("(select) => select.selectedOptions[0].text")
    text_width, room = chooser.evaluate(CHOSEN_TEXT_AND_ROOM)
    assert text_width <= room, f"the chosen task is {text_width:.0f} px in {room:.0f} px"
    summary = registry.get(LONG_TASK).summary
    expect(page.locator(".field-task .task-summary")).to_have_text(summary)
    page.locator("#id_task").select_option("tests.record")
    expect(page.locator(".field-task .task-summary")).to_have_text(
        registry.get("tests.record").summary
    )


def test_the_job_page_recent_runs_show_each_duration_as_the_run_list_does(
    operator: Page, busy_cluster: dict[str, Model]
) -> None:
    page = operator
    job = busy_cluster["job"]
    page.goto(reverse("admin:jobs_jobrun_changelist") + f"?job__id__exact={job.pk}")
    listed = {}
    for row in page.locator("#result_list tbody tr").all():
        run_id = row.locator("th.field-id, td.field-id").first.inner_text().strip()
        listed[run_id] = row.locator("td.field-duration").inner_text().strip()
    assert any(value not in ("", "-") for value in listed.values()), listed
    page.goto(reverse("admin:jobs_job_change", args=[job.pk]))
    runs = page.locator(".inline-group", has_text="recent runs")
    expect(runs.locator("thead")).to_contain_text(re.compile("duration", re.IGNORECASE))
    shown = {}
    for row in runs.locator("tbody tr.has_original").all():
        link = row.locator("a[href*='/jobrun/']").get_attribute("href") or ""
        run_id = link.rstrip("/").split("/")[-2]
        shown[run_id] = row.locator("td.field-duration").inner_text().strip()
    assert shown == listed
