"""The broker side: a run's message, publishing it (one at a time or a burst), and what a worker
needs of its broker connection (which broker it is, surviving a Redis restart).

The broker is only a doorbell: what is sent here is made from a run row already written, and
nothing here decides a run's fate (that is the database's, ``jobs.guard``)."""
