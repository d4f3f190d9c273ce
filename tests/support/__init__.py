"""Job functions and plain Celery tasks the tests schedule and the test workers run."""
