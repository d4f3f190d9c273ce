"""The database side: its clock, the connections each process asks of it (and the pooler in
front of it), reading tables of millions of rows, and the migration steps only PostgreSQL runs.

What depends on PostgreSQL itself, rather than on the app's rows, lives here; the database's
clock is the only clock that decides (leases, deadlines, liveness, ages)."""
