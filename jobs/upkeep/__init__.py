"""Maintenance: lost and stranded runs, retention, metric roll-ups."""
