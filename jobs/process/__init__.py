"""The process: what a beat's or a worker's process keeps about itself and starts in itself (its
state across forks, its background threads, its log lines' context, a worker's signals).

Each module here concerns the process it runs in, not the cluster: what it holds is made afresh in
each process, and in each child a worker forks."""
