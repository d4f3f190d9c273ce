"""The real admin in headless Chromium: log in, create an interval job on its one page, see its
runs appear from a real beat and worker, run it now, pause it, and see the dashboard chart draw
them. Each step leaves a screenshot (tests/browser/conftest.py: ARTIFACTS); with
JOBS_DOCS_SCREENSHOT=1 the dashboard's also replaces docs/dashboard.png.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from jobs.models import Job, JobRun, RunStatus
from tests.acceptance.conftest import ROOT, Cluster, wait_for
from tests.browser.conftest import PASSWORD, shot

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]


def test_an_operator_creates_watches_runs_pauses_and_sees_the_chart(
    page: Page, cluster: Cluster, tmp_path: Path
) -> None:
    User.objects.create_superuser("operator", password=PASSWORD)
    executions = tmp_path / "executions.log"
    cluster.start_worker("node-a")
    cluster.start_beat("beat-1")

    # Log in.
    page.goto("/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    shot(page, "01-login")
    page.click("input[type=submit]")
    expect(page.locator("#jobs-dashboard-link")).to_be_visible()

    # Create an interval job, everything on one page.
    page.goto("/admin/jobs/job/add/")
    page.fill("#id_name", "browser-report")
    page.select_option("#id_task", "tests.record")
    page.check("input[name=schedule_type][value=interval]")
    page.fill("#id_every", "2s")
    page.fill("#id_kwargs", json.dumps({"log": str(executions)}))
    page.click("summary:has-text('Policies')")
    page.fill("#id_queue", cluster.queue)
    shot(page, "02-add-job")
    page.click("input[name=_save]")
    expect(page.locator("ul.messagelist")).to_contain_text("browser-report")
    job = Job.objects.get(name="browser-report")

    # Its runs appear on its page, from the real beat and worker.
    page.goto(f"/admin/jobs/job/{job.pk}/change/")
    runs = page.locator(".inline-group", has_text="recent runs")

    def a_run_succeeded_on_the_page() -> bool:
        page.reload()
        return "succeeded" in runs.inner_text()

    wait_for(
        a_run_succeeded_on_the_page, timeout=60, what="a succeeded run on the job page", poll=1
    )
    shot(page, "03-runs-appear")

    # Run now, from the job list.
    page.goto("/admin/jobs/job/")
    page.check(f"input[name=_selected_action][value='{job.pk}']")
    page.select_option("select[name=action]", "run_now")
    page.click("button[name=index]")
    message = page.locator("ul.messagelist").inner_text()
    match = re.search(r"Triggered 1 run\(s\): #(\d+)", message)
    assert match, message
    triggered = int(match.group(1))
    wait_for(
        lambda: JobRun.objects.filter(pk=triggered, status=RunStatus.SUCCEEDED).exists(),
        timeout=30,
        what="the run-now run to succeed",
    )
    page.goto(f"/admin/jobs/jobrun/{triggered}/change/")
    expect(page.locator("#content")).to_contain_text("succeeded")
    expect(page.locator("#content")).to_contain_text("Manual")
    shot(page, "04-run-now")

    # Pause.
    page.goto("/admin/jobs/job/")
    page.check(f"input[name=_selected_action][value='{job.pk}']")
    page.select_option("select[name=action]", "pause")
    page.click("button[name=index]")
    page.fill("input[name=reason]", "release freeze")  # the action asks why and until when
    page.fill("input[name=until]", "2h")
    page.click("input[type=submit][value=Pause]")
    expect(page.locator("ul.messagelist")).to_contain_text("Paused 1 job.")
    expect(page.locator("#result_list")).to_contain_text("release freeze")
    job.refresh_from_db()
    assert job.enabled is False
    shot(page, "05-paused")

    # The dashboard draws the runs.
    page.goto("/admin/")
    page.click("text=Jobs dashboard")
    chart = page.locator("svg.runs-chart")
    expect(chart).to_be_visible()
    assert page.locator("svg.runs-chart rect.status-succeeded").count() >= 1
    box = chart.bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 100
    shot(page, "06-dashboard")
    if os.environ.get("JOBS_DOCS_SCREENSHOT") == "1":
        page.screenshot(path=str(ROOT / "docs" / "dashboard.png"), full_page=True)
