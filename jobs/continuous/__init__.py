"""Continuous jobs: nodes, placement, the supervisor and tenures."""
