"""The process: what a beat's or a worker's process keeps about itself and starts in itself (its
state across forks, its background threads, its log lines' context, a worker's signals).

Each module here concerns one process, never the cluster: what it holds is started afresh in each
process (and each forked child), and is never shared through the database or the broker."""
