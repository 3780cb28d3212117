"""The no-op task of the peers section (sections/peers.py), for each peer queue.

FORKQ_PEER names the peer whose worker imports this module: `dramatiq` (a Redis broker
at FORKQ_PEER_REDIS), `huey` (a SqliteHuey at FORKQ_PEER_HUEY_DB) or `rq` (which needs
only the function's dotted path, `peer_tasks.noop`).
"""

from __future__ import annotations

import os
from typing import Any

PEER = os.environ.get("FORKQ_PEER", "")


def noop(*args: Any, **kwargs: Any) -> None:
    """Nothing: what is left is the peer's own cost per job."""


if PEER == "dramatiq":
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    dramatiq.set_broker(RedisBroker(url=os.environ["FORKQ_PEER_REDIS"]))
    noop_actor = dramatiq.actor(noop, actor_name="noop", max_retries=0)

if PEER == "huey":
    from huey import SqliteHuey

    huey = SqliteHuey(filename=os.environ["FORKQ_PEER_HUEY_DB"], results=False)
    noop_task = huey.task()(noop)
