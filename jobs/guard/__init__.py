"""The guarded run: lease with fencing, run records, the runner and its policies."""
