"""A small Django project for tests/store/test_django.py and tests/daemon/test_django_daemon.py:
one app (shop) with tasks."""
