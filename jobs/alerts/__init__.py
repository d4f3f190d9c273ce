"""Alerts: incidents, the outbox of their notifications, and the channels.

Incidents are opened and resolved by the database (``jobs/sql/alerts.sql``): a trigger on run
outcomes, and the checks of :mod:`jobs.alerts.detect`, write the incident and its outbox rows in
one transaction; :mod:`jobs.alerts.sender` delivers those rows, one sender at a time across the
cluster, at least once, each with a stable idempotency key.
"""
