"""A small app whose background work is written as Django 6's documentation writes tasks
(``tasks.py``, ``@task`` from ``django.tasks``), run by the cluster's backend in
tests/acceptance/test_django_tasks_cluster.py. Imported only on Django 6."""
