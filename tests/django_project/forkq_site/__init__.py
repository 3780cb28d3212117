"""A small Django project for tests/test_django.py: one app (shop) with tasks."""
