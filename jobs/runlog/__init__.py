"""A run's own log: every line its code logs (``logging``, at the job's level) and prints
(stdout, stderr) while it runs, kept with the run, redacted and bounded.

What belongs here: catching a run's lines in its worker process (``capture``: the root logger's
handler and the redirected streams, for the run's duration), holding them within the run's bounds
(``lines``: the first and last lines kept, the count of those cut between), writing them from a
background thread on a connection of its own (``writer``), and reading them back after a cursor
(``reading``) for the API, the CLI and the admin. Nothing here writes a run's own row.
"""
