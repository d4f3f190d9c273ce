"""A Django project that declares its periodic tasks the way real Celery projects do, in all
three places: a ``CELERY_BEAT_SCHEDULE`` dict in its settings (``settings``), ``add_periodic_task``
calls in ``on_after_configure`` and ``on_after_finalize`` handlers of its Celery app
(``celery_app``), and django-celery-beat rows (made by the test). The adoption acceptance test
runs beats and workers on it (tests/acceptance/test_declared_schedules.py)."""
