"""The broker side: a run's message, publishing it (one at a time or a burst), and what a worker
needs of its broker connection (which broker it is, surviving a Redis restart).

The broker is only a doorbell: a message carries a run's id, and the run's row, written before
the message is sent, is the truth."""
