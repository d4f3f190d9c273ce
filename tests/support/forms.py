"""What the admin's job add/change page posts for a valid interval job."""

from __future__ import annotations


def job_form_data(**overrides: str) -> dict[str, str]:
    """A valid interval job of ``tests.record``; ``overrides`` replace fields."""
    data = {
        "name": "report",
        "task": "tests.record",
        "enabled": "on",
        "schedule_type": "interval",
        "every": "10s",
        "cron": "",
        "timezone": "UTC",
        "run_at_0": "",
        "run_at_1": "",
        "args": "[]",
        "kwargs": '{"log": "-"}',
        "overlap": "skip",
        "start_deadline": "300",
        "catch_up": "latest",
        "on_lost": "abandon",
        "max_retries": "0",
        "retry_backoff": "10",
        "soft_time_limit": "",
        "time_limit": "",
        "lease_ttl": "30",
        "min_hold": "0",
        "queue": "default",
        "priority": "",
        "max_concurrency": "1",
        "rate_limit_runs": "",
        "rate_limit_period": "",
        "alert_channels": "default",
        "alert_reasons": "[]",
        "max_duration": "",
        "long_run_factor": "",
        "min_duration": "",
        "baseline_alerts": "on",
    }
    data.update(overrides)
    return data
