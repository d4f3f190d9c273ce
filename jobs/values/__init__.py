"""Values anyone may write, and how values are written out: what a name or a text may hold, the
JSON people type, how an instant reads, how jobs and runs are shown (``serializers``), which
secrets are masked in what the cluster shows or keeps (``redaction``).

Each such rule is defined here once and every edge (admin, API, CLI, alerts, audit, the beat's
records) asks it; nothing here imports an edge, so all of them can stand above it."""
