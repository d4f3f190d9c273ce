"""The app's tuning knobs, read once from Django settings into a frozen, validated value."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from ipaddress import IPv4Network, IPv6Network, ip_network
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from jobs.alerts.channels import Channel, registered
from jobs.alerts.targets import require_http_url
from jobs.runlog.lines import level_number

# What the app assumes when a project sets nothing (so `INSTALLED_APPS` is all it needs); this
# repository's project/settings.py reads each from the environment with the same defaults.
RETENTION_DEFAULTS = MappingProxyType(
    {
        "succeeded": "7d",
        "skipped": "7d",
        "cancelled": "7d",
        "failed": "30d",
        "missed": "30d",
        "lost": "30d",
    }
)
DEFAULTS: Mapping[str, object] = MappingProxyType(
    {
        "JOBS_MODULES": (),
        "JOBS_BEAT_MAX_INTERVAL": 0.5,
        "JOBS_NODE_HEARTBEAT": 5.0,
        "JOBS_MAINTENANCE_INTERVAL": 5.0,
        "JOBS_REPUBLISH_AFTER": 30.0,
        "JOBS_BULK_PUBLISH": True,
        "JOBS_BEAT_TEST_CLOCK_OFFSET": 0.0,
        "FLOWER_URL": "",
        "JOBS_METRICS_ALLOW_FROM": (),
        "JOBS_BEAT_HEARTBEAT_INTERVAL": 5.0,
        "JOBS_BEAT_STALE_AFTER": 30.0,
        "JOBS_RETENTION": RETENTION_DEFAULTS,
        "JOBS_RETENTION_INTERVAL": 3600.0,
        "JOBS_RETENTION_VACUUM": True,
        "JOBS_PUBLIC_URL": "",
        "JOBS_RUN_LOG": True,
        "JOBS_RUN_LOG_LEVEL": "INFO",
        "JOBS_RUN_LOG_MAX_LINES": 2000,
        "JOBS_RUN_LOG_MAX_LINE_CHARS": 4000,
        "JOBS_RUN_LOG_FLUSH_SECONDS": 1.0,
    }
)


def _setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])


@dataclass(frozen=True)
class JobsConf:
    modules: tuple[str, ...]
    beat_max_interval: float
    # Seconds between a worker node's heartbeats; 3 missed ones make it dead
    # (jobs.continuous.nodes), and a
    # continuous job's lease lasts 3 heartbeats unless its lease_ttl is shorter.
    node_heartbeat: float = 5.0
    # Beat maintenance (jobs.upkeep.maintenance): how often a pass runs, and how long a run may stay
    # scheduled after its message was sent before it is published again.
    maintenance_interval: float = 5.0
    republish_after: float = 30.0
    # A burst's messages built once per job shape and sent a chunk per round trip
    # (jobs.broker.bulk_publish); off: one send_task per run, as before.
    bulk_publish: bool = True
    # Testing only: shifts the beat's clock, to simulate a skewed node clock.
    beat_test_clock_offset: float = 0.0

    def __post_init__(self) -> None:
        if self.beat_max_interval <= 0:
            raise ImproperlyConfigured("JOBS_BEAT_MAX_INTERVAL must be positive (seconds).")
        if self.maintenance_interval <= 0:
            raise ImproperlyConfigured("JOBS_MAINTENANCE_INTERVAL must be positive (seconds).")
        if self.republish_after <= 0:
            raise ImproperlyConfigured("JOBS_REPUBLISH_AFTER must be positive (seconds).")
        if self.node_heartbeat < 0.5:
            raise ImproperlyConfigured("JOBS_NODE_HEARTBEAT must be at least 0.5 (seconds).")


@cache
def get_conf() -> JobsConf:
    return JobsConf(
        modules=tuple(_setting("JOBS_MODULES")),
        beat_max_interval=float(_setting("JOBS_BEAT_MAX_INTERVAL")),
        node_heartbeat=float(_setting("JOBS_NODE_HEARTBEAT")),
        maintenance_interval=float(_setting("JOBS_MAINTENANCE_INTERVAL")),
        republish_after=float(_setting("JOBS_REPUBLISH_AFTER")),
        bulk_publish=bool(_setting("JOBS_BULK_PUBLISH")),
        beat_test_clock_offset=float(_setting("JOBS_BEAT_TEST_CLOCK_OFFSET")),
    )


# --- operations: health, metrics access, retention, Flower link -----------------------------


@dataclass(frozen=True)
class OpsConf:
    flower_url: str
    metrics_allow_from: tuple[IPv4Network | IPv6Network, ...]
    beat_heartbeat_interval: float
    beat_stale_after: float
    # Status → how long finished runs in it are kept; ``None``: forever.
    retention: Mapping[str, timedelta | None]
    retention_interval: float
    # A pruning pass that deleted runs vacuums the run and lease tables (jobs.upkeep.retention).
    retention_vacuum: bool = True

    def __post_init__(self) -> None:
        if self.beat_stale_after <= self.beat_heartbeat_interval:
            raise ImproperlyConfigured(
                "JOBS_BEAT_STALE_AFTER must be longer than JOBS_BEAT_HEARTBEAT_INTERVAL, "
                "or every live beat would look gone between two heartbeats."
            )


def _network(text: str) -> IPv4Network | IPv6Network:
    try:
        return ip_network(text, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"JOBS_METRICS_ALLOW_FROM: {text!r} is not an address or network, e.g. 10.0.0.0/8."
        ) from None


def _retention(status: str, text: str) -> timedelta | None:
    from jobs.models import TERMINAL_STATUSES
    from jobs.schedule.kinds import parse_duration

    name = f"JOBS_RETENTION_{status.upper()}"
    if status not in TERMINAL_STATUSES:
        raise ImproperlyConfigured(f"{name}: only finished runs are pruned")
    if text.strip().lower() == "forever":
        return None
    try:
        age = parse_duration(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={text!r}: {exc}, or forever.") from None
    if age <= timedelta(0):
        raise ImproperlyConfigured(f"{name}={text!r} must be positive (or forever).")
    return age


@cache
def get_ops_conf() -> OpsConf:
    return OpsConf(
        flower_url=str(_setting("FLOWER_URL")).rstrip("/"),
        metrics_allow_from=tuple(_network(item) for item in _setting("JOBS_METRICS_ALLOW_FROM")),
        beat_heartbeat_interval=float(_setting("JOBS_BEAT_HEARTBEAT_INTERVAL")),
        beat_stale_after=float(_setting("JOBS_BEAT_STALE_AFTER")),
        retention=MappingProxyType(
            {
                status: _retention(status, text)
                for status, text in {**RETENTION_DEFAULTS, **_setting("JOBS_RETENTION")}.items()
            }
        ),
        retention_interval=float(_setting("JOBS_RETENTION_INTERVAL")),
        retention_vacuum=bool(_setting("JOBS_RETENTION_VACUUM")),
    )


# --- a run's own log (jobs.runlog) --------------------------------------------------------------


def _run_log_level(text: object) -> int:
    try:
        return level_number(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"JOBS_RUN_LOG_LEVEL={text!r}: {exc}.") from None


@dataclass(frozen=True)
class RunLogConf:
    # Whether runs keep their log at all (off: nothing is captured, nothing costs).
    enabled: bool = True
    # The lowest ``logging`` level kept, unless the job declares its own.
    level: int = logging.INFO
    # Lines kept per run: the first ``max_lines // 2`` and the last ``max_lines - that``.
    max_lines: int = 2000
    # A longer line is cut to this many characters.
    max_line_chars: int = 4000
    # How often the lines of a running run are written (seconds).
    flush_seconds: float = 1.0

    def __post_init__(self) -> None:
        if self.max_lines < 2:
            raise ImproperlyConfigured("JOBS_RUN_LOG_MAX_LINES must be at least 2.")
        if self.max_line_chars < 80:
            raise ImproperlyConfigured("JOBS_RUN_LOG_MAX_LINE_CHARS must be at least 80.")
        if self.flush_seconds <= 0:
            raise ImproperlyConfigured("JOBS_RUN_LOG_FLUSH_SECONDS must be positive (seconds).")

    @property
    def head_lines(self) -> int:
        """How many of a run's first lines are kept whatever follows."""
        return self.max_lines // 2

    @property
    def tail_lines(self) -> int:
        """How many of a run's last lines are kept."""
        return self.max_lines - self.head_lines


@cache
def get_run_log_conf() -> RunLogConf:
    return RunLogConf(
        enabled=bool(_setting("JOBS_RUN_LOG")),
        level=_run_log_level(_setting("JOBS_RUN_LOG_LEVEL")),
        max_lines=int(_setting("JOBS_RUN_LOG_MAX_LINES")),
        max_line_chars=int(_setting("JOBS_RUN_LOG_MAX_LINE_CHARS")),
        flush_seconds=float(_setting("JOBS_RUN_LOG_FLUSH_SECONDS")),
    )


# --- alerts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlertsConf:
    public_url: str
    # Every registered channel as its settings configure it (jobs.alerts.channels), validated
    # when built; configured or not.
    backends: tuple[Channel, ...] = ()

    def __post_init__(self) -> None:
        if self.public_url:
            require_http_url("JOBS_PUBLIC_URL", self.public_url)

    @property
    def channels(self) -> frozenset[str]:
        """The channels configured: the others' notifications are dropped."""
        return frozenset(backend.name for backend in self.backends if backend.configured)

    def backend(self, name: str) -> Channel | None:
        """The channel ``name``, or ``None`` when no channel has that name."""
        return next((backend for backend in self.backends if backend.name == name), None)


@cache
def get_alerts_conf() -> AlertsConf:
    return AlertsConf(
        public_url=str(_setting("JOBS_PUBLIC_URL")).rstrip("/"),
        backends=tuple(
            channel.from_settings(
                {s.name: getattr(settings, s.name, s.default) for s in channel.settings}
            )
            for channel in registered().values()
        ),
    )
