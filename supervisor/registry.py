"""Handler registrations: the only code a job row can make the daemon run.

A row names a handler by string; the worker looks it up here and nowhere else. A
name nobody registered ends the job dead. Handler modules are imported by name from
the config (never from a row), before any fork, so a broken module fails the boot.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from supervisor import events
from supervisor.errors import ConfigError
from supervisor.policy import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_SNOOZES,
)

if TYPE_CHECKING:
    from supervisor.config import CommandConfig, Config

HandlerFunc = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Handler:
    name: str
    func: HandlerFunc
    queue: str = "default"
    timeout: float | None = None  # None: the pool's timeout
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_base: float = DEFAULT_BACKOFF_BASE
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    argv: tuple[str, ...] = ()  # a [commands."NAME"] table's program; () for a function
    max_snoozes: int = DEFAULT_MAX_SNOOZES  # Snooze requests before the job ends dead
    keep_result: bool = False  # its return value is kept (forkq_results), for q.result


_HANDLERS: dict[str, Handler] = {}


def handler(
    name: str,
    *,
    queue: str = "default",
    timeout: float | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    backoff_base: float = DEFAULT_BACKOFF_BASE,
    backoff_cap: float = DEFAULT_BACKOFF_CAP,
    max_snoozes: int = DEFAULT_MAX_SNOOZES,
    keep_result: bool = False,
) -> Callable[[HandlerFunc], HandlerFunc]:
    """Register `func(payload, job)` under `name`; `queue` is where `enqueue` sends it by default.

    `max_snoozes`: how many times one job may raise Snooze before it ends dead.
    `keep_result`: what it returns (JSON) is kept for `Queue.result` and `Queue.wait`."""
    if not name or len(name) > 191:
        raise ValueError("a handler name has 1 to 191 characters")
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if max_snoozes < 0:
        raise ValueError("max_snoozes must be at least 0")

    def register(func: HandlerFunc) -> HandlerFunc:
        _HANDLERS[name] = Handler(
            name,
            func,
            queue,
            timeout,
            max_attempts,
            backoff_base,
            backoff_cap,
            max_snoozes=max_snoozes,
            keep_result=keep_result,
        )
        return func

    return register


def get(name: str) -> Handler | None:
    return _HANDLERS.get(name)


def queue_of(name: str) -> str:
    """The queue a handler's jobs go to when none is named: its registered one, else
    "default" (as building.build_job decides)."""
    registered = _HANDLERS.get(name) if isinstance(name, str) else None
    return registered.queue if registered else "default"


def names() -> list[str]:
    return sorted(_HANDLERS)


def unserved(config: Config) -> list[Handler]:
    """Registered handlers whose queue no pool of `config` works: their jobs would wait
    for ever (a pool works the queue of its name)."""
    served = {pool.name for pool in config.pools}
    return [h for _, h in sorted(_HANDLERS.items()) if h.queue not in served]


def log_unrunnable(config: Config, log: Any) -> None:
    """At boot and on HUP, what could never run as `config` says: a handler whose queue
    no pool serves (its jobs would wait for ever) and a schedule whose handler nothing
    registers (its jobs would end dead here; `forkq check` refuses it, another host may
    run it)."""
    for handler in unserved(config):
        log.warning(events.HANDLER_QUEUE_UNSERVED, handler=handler.name, queue=handler.queue)
    for schedule in [s for s in config.schedules if get(s.handler) is None]:
        log.warning(
            events.SCHEDULE_HANDLER_UNKNOWN, schedule=schedule.name, handler=schedule.handler
        )


def clear() -> None:
    """Forget every registration (HUP reload imports the modules afresh)."""
    _HANDLERS.clear()


def load_modules(
    modules: Iterable[str], reload: bool = False, *, source: str | None = None
) -> list[str]:
    """Import the configured handler modules; a module that fails is a config error.

    `source` is the config file that names the modules: the error starts with it, as
    every other config error does, and stays one line whatever the module raised.
    """
    loaded = []
    for module in modules:
        try:
            if reload and module in sys.modules:
                importlib.reload(sys.modules[module])
                _reload_submodules(module)
            else:
                importlib.import_module(module)
        except Exception as exc:
            where = f"{source}: " if source else ""
            detail = " ".join(str(exc).split())
            reason = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
            reason += _where_to_put(module, exc)
            raise ConfigError(
                f"{where}supervisor.handlers: module {module!r} failed to import: {reason}"
            ) from exc
        loaded.append(module)
    return loaded


def _where_to_put(module: str, exc: Exception) -> str:
    """When the configured module itself (or its package) is not found, not one it
    imports: where forkq looks. `forkq` is a console script, which does not search the
    current directory, so an app's module beside the config is not found by itself."""
    if not isinstance(exc, ModuleNotFoundError) or exc.name is None:
        return ""
    if module != exc.name and not module.startswith(exc.name + "."):
        return ""
    return (
        f" (forkq imports it with {sys.executable}: install it there,"
        " or add its directory to PYTHONPATH)"
    )


def load(
    config: Config, runner: Callable[[CommandConfig], HandlerFunc], *, reload: bool = False
) -> list[str]:
    """Import the config's handler modules, then register its `[commands."NAME"]` tables,
    each run by `runner(table)` (supervisor.work.command, whose `load_handlers` calls this:
    the registry itself starts no process).

    A name both a module and a command register is a config error: which one a job
    would run must never depend on the order of registration. On a reload, commands
    the new config no longer has are forgotten.
    """
    loaded = load_modules(config.supervisor.handlers, reload, source=config.source)
    taken = sorted(
        c.name for c in config.commands if c.name in _HANDLERS and not _HANDLERS[c.name].argv
    )
    if taken:
        raise ConfigError(
            "\n".join(
                f"{config.source}: commands.{json.dumps(name)}: {name!r} is also a Python"
                " handler (@handler) in a module of [supervisor] handlers; rename one"
                for name in taken
            )
        )
    for name in [n for n, h in _HANDLERS.items() if h.argv]:
        del _HANDLERS[name]
    for command in config.commands:
        _HANDLERS[command.name] = Handler(
            command.name,
            runner(command),
            command.queue,
            command.timeout,
            command.max_attempts,
            command.backoff_base,
            command.backoff_cap,
            argv=command.argv,
            max_snoozes=command.max_snoozes,
            keep_result=command.keep_result,
        )
    return loaded


def unrunnable(config: Config, handler: str, queue: str | None, what: str) -> list[str]:
    """Why `what` (a job just enqueued, a schedule's jobs) may never run as `config` says:
    no registration of its handler, no pool of its queue. Only with a config file: the
    daemons' config may differ from a default one, so `forkq enqueue`, `schedule add` and
    the dashboard warn and go on."""
    if not config.from_file:
        return []
    registered = get(handler)
    queue = queue or (registered.queue if registered else "default")
    reasons = []
    if registered is None:
        reasons.append(
            f"no handler module or [commands] table of {config.source} registers"
            f" {handler!r}: a worker ends {what} dead (unknown handler)"
        )
    if config.pool(queue) is None:
        reasons.append(
            f"no pool of {config.source} serves queue {queue!r}: {what} waits until a"
            f" [pools.{queue}] works it"
        )
    return reasons


def _reload_submodules(package: str) -> None:
    prefix = package + "."
    for name in sorted(n for n in list(sys.modules) if n.startswith(prefix)):
        importlib.reload(sys.modules[name])
