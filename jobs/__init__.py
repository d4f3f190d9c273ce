"""Scheduled jobs that run exactly once per schedule across a cluster.

Job code: ``from jobs import job``, then ``@job("billing.close_day")`` on
``def close_day(ctx): ...``.
"""

from jobs.registry import job

__all__ = ["job"]
