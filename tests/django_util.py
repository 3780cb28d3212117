"""The real Django project of the Django tests (tests/django_project), in this process.

Django is set up once per test session, from the project's settings module, and its
"default" database is pointed at each test's `db_url` (SQLite file or MariaDB database,
forkq's schema applied), as Django's own test runner points it at a test database. The
daemons the tests start read the same settings, with FORKQ_DJANGO_DATABASE_URL naming
the same database.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from util import REPO_ROOT

DJANGO_PROJECT = Path(__file__).resolve().parent / "django_project"
SETTINGS = "forkq_site.settings"
PLACEHOLDER_URL = "sqlite:///:memory:"  # until a test points Django at its database


def setup_django() -> ModuleType:
    """django.setup() with the project's settings (once); the project's tasks module."""
    import django
    from django.apps import apps

    if str(DJANGO_PROJECT) not in sys.path:
        sys.path.insert(0, str(DJANGO_PROJECT))
    if not apps.ready:
        saved = {
            k: os.environ.get(k) for k in ("DJANGO_SETTINGS_MODULE", "FORKQ_DJANGO_DATABASE_URL")
        }
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
        os.environ["FORKQ_DJANGO_DATABASE_URL"] = PLACEHOLDER_URL
        try:
            django.setup()
        finally:  # the other suites' subprocesses inherit no Django settings
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return importlib.import_module("shop.tasks")


def point_django_at(db_url: str, alias: str = "default") -> None:
    """Make this thread's `alias` connection one to `db_url`'s database."""
    from django.db import connections

    settings = importlib.import_module(SETTINGS)
    connections.close_all()
    entries = {**connections.settings, alias: settings.database(db_url)}
    connections.settings[alias] = connections.configure_settings(entries)[alias]
    with contextlib.suppress(AttributeError):  # no connection made in this thread yet
        del connections[alias]


@pytest.fixture(name="shop", scope="session")
def shop_fixture() -> ModuleType:
    """The project's `shop.tasks` module, Django set up."""
    return setup_django()


@pytest.fixture(name="django_db")
def django_db_fixture(db_url: str, shop: ModuleType) -> Iterator[str]:
    """Django's default database is `db_url` (forkq's schema applied, tables empty)."""
    point_django_at(db_url)
    yield db_url
    from django.db import connections

    connections.close_all()


def daemon_env(tmp_path: Path, db_url: str, **extra: str) -> dict[str, str]:
    """The environment of a daemon that runs the project's tasks against `db_url`."""
    return {
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "FORKQ_DJANGO_DATABASE_URL": db_url,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(DJANGO_PROJECT), str(REPO_ROOT)]),
        **extra,
    }


DAEMON_POOLS: dict[str, dict[str, Any]] = {
    "default": {"workers": 1},
    "reports": {"workers": 1},
}
DAEMON_SUPERVISOR: dict[str, Any] = {"handlers": ["supervisor.contrib.django"]}
