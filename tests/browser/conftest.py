"""Headless Chromium (Debian's, driven by Playwright; no browser is ever downloaded) against the
live server, at a laptop's 1366 px width. The browser tests also share the acceptance suite's
real worker and beat processes.

A machine without /usr/bin/chromium fails these tests (`make test` installs it): a skipped
browser test would look like a passing one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connections
from playwright.sync_api import Browser, Page, ViewportSize, expect, sync_playwright

from tests.acceptance.conftest import ROOT, cluster  # noqa: F401  (the fixture, re-exported)

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The smallest common laptop screen: every admin page must work at this size.
VIEWPORT = ViewportSize(width=1366, height=768)
PASSWORD = "a-long-test-password-4242"
# Screenshots of each step (git-ignored); JOBS_BROWSER_ARTIFACTS puts them elsewhere.
ARTIFACTS = Path(os.environ.get("JOBS_BROWSER_ARTIFACTS") or ROOT / "artifacts" / "browser")


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    # Playwright's sync API keeps an event loop running in this thread, which Django takes for
    # async code; the tests' own queries are ordinary synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: `apt-get install -y chromium chromium-driver` "
            "(make test does this when `command -v chromium` fails)"
        )
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()
            # While Playwright's loop runs, Django keeps the test's connections apart from the
            # thread's usual ones; close them here, or the test database could not be dropped.
            connections.close_all()


@pytest.fixture
def page(browser: Browser, live_server: object) -> Iterator[Page]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(base_url=str(live_server), viewport=VIEWPORT)
    context.set_default_timeout(15_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def operator(page: Page) -> Page:
    """The page, logged in to the admin as a superuser."""
    User.objects.create_superuser("operator", password=PASSWORD)
    page.goto("/admin/login/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text("operator")
    return page


def shot(page: Page, name: str) -> None:
    """A full-page screenshot under ``ARTIFACTS``."""
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
