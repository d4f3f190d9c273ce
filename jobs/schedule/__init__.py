"""Schedules: their kinds and parsing, slot identity, catch-up after downtime."""
