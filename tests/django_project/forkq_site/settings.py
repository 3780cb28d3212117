"""Settings of the test project. The database is FORKQ_DJANGO_DATABASE_URL, a forkq URL
(sqlite:////path.db or mysql://user:pass@host:3306/db) whose schema forkq applied: the
tests and the daemon they start point Django and forkq at the same database."""

import importlib.util
import os
from typing import Any

import pymysql

from supervisor.dburl import parse_database_url

# Django's MySQL backend on PyMySQL (mysqlclient needs a C build): forkq enqueues on
# Django's own connection, which must then be a PyMySQL one.
pymysql.install_as_MySQLdb()

SECRET_KEY = "forkq-test-project-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["shop"]
if importlib.util.find_spec("django.tasks") is None:  # before Django 6: the backport app
    INSTALLED_APPS.insert(0, "django_tasks")


def database(url: str) -> dict[str, Any]:
    """A DATABASES entry for a forkq URL."""
    parsed = parse_database_url(url)
    if parsed.backend == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.path}
    return {
        "ENGINE": "django.db.backends.mysql",
        "NAME": parsed.database,
        "HOST": parsed.host,
        "PORT": str(parsed.port),
        "USER": parsed.user,
        "PASSWORD": parsed.password,
        "OPTIONS": {"charset": "utf8mb4"},
    }


DATABASES = {
    "default": database(os.environ.get("FORKQ_DJANGO_DATABASE_URL", "sqlite:///forkq-django.db")),
    # forkq's `[databases.reports]`: the jobs of queue "reports" of the "routed" backend.
    "reports_db": database(os.environ.get("FORKQ_DJANGO_REPORTS_URL", "sqlite:///:memory:")),
}

TASKS = {
    "default": {
        "BACKEND": "supervisor.contrib.django.ForkqBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {"database": "default", "max_attempts": 2},
    },
    "routed": {
        "BACKEND": "supervisor.contrib.django.ForkqBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {"database": "default", "queue_databases": {"reports": "reports_db"}},
    },
}
