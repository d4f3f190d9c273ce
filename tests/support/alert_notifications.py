"""One incident's notification, as the channels' tests send it."""

from __future__ import annotations

from typing import Any

from jobs.alerts.notification import Notification

SECRET = "k" * 32
BODY: dict[str, Any] = {
    "text": ":rotating_light: [failed] job report is failing <http://jobs/i/7|incident #7>",
    "incident": {
        "id": 7, "kind": "failing", "reason": "failed", "opened_at": "2026-11-23T22:00:00+00:00",
        "resolved_at": None, "bad_runs": 2, "summary": "ValueError: boom",
        "url": "http://jobs/admin/jobs/incident/7/change/",
    },
    "job": {"id": 3, "name": "report", "url": "http://jobs/admin/jobs/job/3/change/"},
    "runs": {
        "first": {"id": 11},
        "last": {"id": 12, "status": "failed", "url": "http://jobs/admin/jobs/jobrun/12/change/"},
        "resolved_by": None,
    },
}  # fmt: skip
NOTIFICATION = Notification(
    idempotency_key="incident-7-opened", event="opened", body=BODY,
    subject="[jobs] FAILED: job report is failing",
    headline="[failed] job report is failing",
)  # fmt: skip
