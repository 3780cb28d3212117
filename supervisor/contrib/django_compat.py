"""Django's Tasks framework as installed: `django.tasks` (Django 6) or the `django_tasks`
backport (Django 4.2 to 5.2). The rest of supervisor.contrib imports its names from here.

Django 6 is preferred when it is there, so a project that upgrades keeps working; the
backport names its exceptions InvalidTaskError and InvalidTaskBackendError where Django
says InvalidTask and InvalidTaskBackend, and both are exported under Django's names.
Type checking reads the backport (what Python 3.11 gets).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from supervisor.errors import install_hint

try:
    NATIVE = importlib.util.find_spec("django.tasks") is not None
except ImportError as exc:  # no django at all
    raise ImportError(
        "supervisor.contrib.django needs Django and its Tasks framework: "
        + install_hint("django")
    ) from exc

if TYPE_CHECKING:
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
elif NATIVE:
    from django.dispatch import Signal
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks import signals as _signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist

    task_enqueued = _signals.task_enqueued
    task_finished = _signals.task_finished
    task_started = getattr(_signals, "task_started", None) or Signal()  # not in early 6.0 drafts
else:
    try:
        from django_tasks import TaskResultStatus, task_backends
    except ImportError as exc:
        raise ImportError(
            "supervisor.contrib.django: this Django has no django.tasks (Django 6);"
            " install the backport (django-tasks): " + install_hint("django")
        ) from exc
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

__all__ = [
    "NATIVE",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
