"""The benchmark sections, one module each, in the order a run goes through them.

`SECTIONS` maps each name to its hard deadline in seconds (`run.py --sections NAME,...`;
all of them, in this order, by default) and `GROUPS` holds the aliases (`scale+`). A
section is its module's `run(bench, deadline)`, with the run's `harness.Bench`; the five
scale+ sections that measure on databases of their own (a private mariadbd or a SQLite
file, scale_env.py) get a `scale_common.Ctx` instead. `METHOD` is RESULTS.md's "How each
figure is measured", section by section; `REPRODUCE` adds the scale+ commands.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import scale_env

from . import (
    batches,
    chains,
    claims,
    commands,
    databases,
    drain,
    enqueue,
    fair,
    galera,
    idle,
    latency,
    limits,
    memory,
    mixed,
    peers,
    scale,
    scale_common,
    silent,
    tick,
    trickle,
    unique,
    wake,
)

SECTIONS: dict[str, float] = {  # name -> hard deadline in seconds
    "enqueue": 90.0,
    "unique": 60.0,
    "drain": 220.0,
    "mixed": 200.0,
    "peers": 420.0,
    "latency": 45.0,
    "idle": 70.0,
    "memory": 60.0,
    "scale": 200.0,
    "claims": 240.0,
    "tick": 330.0,
    "wake": 60.0,
    "silent": 200.0,
    "trickle": 200.0,
    "commands": 150.0,
    "limits": 300.0,
    "fair": 420.0,
    "chains": 150.0,
    "galera": 420.0,
    "databases": 240.0,
    "batches": 360.0,
}
MODULES: dict[str, ModuleType] = {
    "enqueue": enqueue,
    "unique": unique,
    "drain": drain,
    "mixed": mixed,
    "peers": peers,
    "latency": latency,
    "idle": idle,
    "memory": memory,
    "scale": scale,
    "claims": claims,
    "tick": tick,
    "wake": wake,
    "silent": silent,
    "trickle": trickle,
    "commands": commands,
    "limits": limits,
    "fair": fair,
    "chains": chains,
    "galera": galera,
    "databases": databases,
    "batches": batches,
}
PRIVATE = ("claims", "tick", "wake", "silent", "trickle")  # on databases of their own
GROUPS = {"scale+": ["scale", *PRIVATE]}  # --sections aliases
BUDGET = scale_common.BUDGET  # what the scale+ sections add to run.py's total budget

METHOD = [
    *enqueue.METHOD,
    *unique.METHOD,
    *drain.METHOD,
    *mixed.METHOD,
    *peers.METHOD,
    *latency.METHOD,
    *idle.METHOD,
    *memory.METHOD,
    *scale.METHOD,
    *scale_common.METHOD,
    *claims.METHOD,
    *tick.METHOD,
    *wake.METHOD,
    *silent.METHOD,
    *trickle.METHOD,
    *commands.METHOD,
    *limits.METHOD,
    *fair.METHOD,
    *chains.METHOD,
    *galera.METHOD,
    *databases.METHOD,
    *batches.METHOD,
]
REPRODUCE = scale_common.REPRODUCE


def runner(bench: Any, name: str) -> Callable[[Any], None]:
    """Section `name` as the run calls it: `runner(bench, name)(deadline)`."""
    module = MODULES[name]
    if name in PRIVATE:
        return partial(module.run, scale_common.Ctx(bench, name))
    return partial(module.run, bench)


def close() -> None:
    """The end of a backend's run: the scale+ sections' private server goes, if one ran."""
    scale_env.close_server()
