"""A master that serves one database of several (forked by federation.py).

The master itself does not know it is one of several: what differs is decided here,
once, when the supervisor forks it (`become`): the database named in every log line
(its children's too), its title, where its metrics go, and what a reload reads (its
own database's part of the config file). With no `[databases]` none of this is set.
Below, the supervisor's side: `Member`, one master as federation.py keeps track of it.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from supervisor import logs, registry
from supervisor.config import Config, load_config, require_runnable
from supervisor.errors import ConfigError
from supervisor.proc import set_title
from supervisor.work.command import load_handlers

RESPAWN_MAX = 30.0  # seconds between two starts of a master that keeps dying, at most
CREDENTIALS = socket.CMSG_SPACE(struct.calcsize("3i"))

_name: str | None = None  # the database this master serves; None: the only master


def become(name: str) -> None:
    """In the forked master, before anything else."""
    global _name
    _name = name
    logs.stick(database=name)
    set_title(master_title())  # already while it waits for its database
    from supervisor.cluster.alerts import channels
    from supervisor.observe import metrics

    channels.name_database(name)
    metrics.join(name)


def name() -> str | None:
    return _name


def master_title() -> str:
    return "forkq: master" if _name is None else f"forkq: master [{_name}]"


def where(url: str) -> dict[str, str]:
    """master_started's field for its (redacted) URL: `database` as it always was with
    one database; `url` with several, where `database` names the database."""
    return {"database": url} if _name is None else {"url": url}


def checked_config(path: str | None, current: Config, log: Any = None) -> Config:
    """HUP: the file read again and checked as `forkq run` checks it at boot, its handlers
    reloaded; with `log`, what could never run in it said as at boot."""
    config = load_config(path) if path else current
    require_runnable(config)
    load_handlers(config, reload=True)
    if log is not None:
        registry.log_unrunnable(config, log)
    return config


def reloaded_config(path: str | None, current: Config, log: Any) -> Config:
    """HUP: the config checked (checked_config), narrowed to this master's database
    (ConfigError: refused, the master goes on with what it has). A master of several
    leaves the warnings to its supervisor, which reads the whole file."""
    config = checked_config(path, current, log if _name is None else None)
    if _name is None:
        if config.databases:  # one master cannot become several in place
            raise ConfigError("[databases] was added: restart the daemon to serve several")
        return config
    try:
        return config.for_database(_name, registry.queue_of)
    except KeyError:
        raise ConfigError(f"database {_name!r} is no longer in the config") from None


# --- the supervisor's side -------------------------------------------------------------


@dataclass
class Member:
    """One database's master, as the supervisor sees it."""

    name: str
    notify: socket.socket
    pid: int | None = None
    started: float = 0.0
    next_start: float = 0.0
    failures: int = 0
    booted: bool = False  # it said READY=1 (or that it waits for its database)
    waiting: bool = False  # it waits for its database at boot: no WATCHDOG=1 meanwhile
    reload_due: bool = False  # a HUP came before its handlers were in: sent once booted
    resizes: list[int] = field(default_factory=list)  # TTIN/TTOU for then, the same way
    pinged: float = 0.0  # its last WATCHDOG=1
    killed: bool = False  # killed for a silent watchdog: no longer waited for, not yet reaped
    leaving: bool = False  # removed from the config: stopped, not started again
    status: str = "starting"  # its last STATUS=, shown in `systemctl status` with the others'


def sender(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The pid that sent a notify message (SCM_CREDENTIALS: pid, uid, gid)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= 4:
            return int(struct.unpack("i", data[:4])[0])
    return None


def respawn_delay(failures: int) -> float:
    """Seconds before starting again a master that died `failures` times in a row."""
    return 0.0 if failures <= 1 else min(RESPAWN_MAX, 0.5 * 2 ** (failures - 1))
