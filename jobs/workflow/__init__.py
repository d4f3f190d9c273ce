"""Runs made from other runs or from the past: a job's runs after its upstreams' (dependencies)
and the runs of past slots that had none (backfill).

A run made here is a run like any other (one per slot, guarded, fenced): only its trigger and
when it is released differ, so these modules add runs and never change how a run executes."""
