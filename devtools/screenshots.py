"""The admin's screenshots in docs/operating.md, taken at 1366 by 768 (the smallest laptop screen
every admin page must fit) with Debian's Chromium from a running platform (``make run``)::

    python -m devtools.screenshots http://127.0.0.1:8000 admin PASSWORD [JOB]

The job list, the page of ``JOB`` (default ``demo.slow``: a lease, recent runs of every kind, its
next slots, its duration chart), the page of its latest finished run (its own log) and the
blackout list; each page as it scrolls, whole.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path

from playwright.sync_api import Page, ViewportSize, sync_playwright

DOCS = Path(__file__).resolve().parents[1] / "docs"
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = ViewportSize(width=1366, height=768)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devtools.screenshots")
    parser.add_argument("base_url")
    parser.add_argument("user")
    parser.add_argument("password")
    parser.add_argument("job", nargs="?", default="demo.slow")
    args = parser.parse_args(argv)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(base_url=args.base_url, viewport=VIEWPORT)
        _log_in(page, args.user, args.password)
        page.goto("/admin/jobs/job/")
        _shoot(page, "admin-job-list.png")
        page.get_by_role("link", name=re.compile(f"^{re.escape(args.job)}$")).first.click()
        _shoot(page, "admin-job-page.png")
        finished = page.locator("tr", has_text=re.compile("succeeded|failed")).locator(
            "a[href*='/admin/jobs/jobrun/']"
        )
        finished.first.click()
        page.wait_for_selector("#run-log")
        _shoot(page, "admin-run-page.png")
        page.goto("/admin/jobs/blackout/")
        _shoot(page, "admin-blackout-list.png")
        browser.close()


def _log_in(page: Page, user: str, password: str) -> None:
    page.goto("/admin/login/")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def _shoot(page: Page, name: str) -> None:
    page.screenshot(path=str(DOCS / name), full_page=True)
    print(DOCS / name)


if __name__ == "__main__":
    main()
