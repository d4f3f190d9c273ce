"""Every datetime the admin shows reads as ``jobs.values.timestamps`` defines it (seconds, zone),
instead of English's "Nov. 23, 2026, 7:45 a.m."."""

from jobs.values.timestamps import DATETIME_FORMAT

SHORT_DATETIME_FORMAT = DATETIME_FORMAT

__all__ = ["DATETIME_FORMAT", "SHORT_DATETIME_FORMAT"]
