"""A master that serves one database of several (forked by federation.py).

The master itself does not know it is one of several: what differs is decided here,
once, when the supervisor forks it (`become`): the database named in every log line
(its children's too), its title, where its metrics go, and what a reload reads (its
own database's part of the config file). With no `[databases]` none of this is set.
"""

from __future__ import annotations

from supervisor import logs, registry
from supervisor.config import Config, load_config
from supervisor.errors import ConfigError
from supervisor.proc import set_title
from supervisor.work.command import load_handlers

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


def reloaded_config(path: str | None, current: Config) -> Config:
    """HUP: the config file read again, handlers reloaded, narrowed to this master's
    database (ConfigError: refused, the master goes on with what it has)."""
    config = load_config(path) if path else current
    load_handlers(config, reload=True)
    if _name is None:
        if config.databases:  # one master cannot become several in place
            raise ConfigError("[databases] was added: restart the daemon to serve several")
        return config
    try:
        return config.for_database(_name, registry.queue_of)
    except KeyError:
        raise ConfigError(f"database {_name!r} is no longer in the config") from None
