"""Same-host wake-up: a producer's datagram tells the local daemons a queue has a job now.

Without it an idle daemon finds a new job on its next poll (`poll_interval`). A
producer on the daemon's own host can do better: right after its insert it sends one
datagram naming the queue(s) to a Unix datagram socket of every local master serving
that database, and the master wakes an idle child of that pool at once. Producers on
other hosts (and producers that turn this off) keep the poll, so the nudge is an
optimisation only: losing one never loses or delays a job beyond the poll.

Where the sockets live: `<runtime dir>/<database key>/<master pid>.sock`.

- The runtime dir is `$FORKQ_RUNTIME_DIR` if set; else `/run/forkq` (systemd's
  `RuntimeDirectory=forkq`, mode 0755) when the daemon can write it; else a per-user
  `<tempdir>/forkq-<uid>`. A producer looks in `$FORKQ_RUNTIME_DIR` alone if set,
  else in both `/run/forkq` and its own per-user dir. So a producer running as another
  user (www-data) reaches the daemon through `/run/forkq` (or a shared
  `FORKQ_RUNTIME_DIR`); the per-user fallback only joins a daemon and producers of the
  same user. A per-user dir must be owned by that user and not writable by others,
  or it is not used (someone else could have made it first in a shared /tmp).
- The database key is a short hash of the database's identity, never of a password or
  user: the absolute path of a SQLite file, or `host:port/database` for MySQL. Every
  local connection (loopback address or unix socket) to database D is taken as the
  same server, whatever its port: the app and the daemon often reach one server by
  different routes, and a false match only costs an idle child one empty claim.
- Several masters on one host for one database each bind their own socket in the same
  directory; a producer sends to every socket there. A socket left by a dead master
  refuses datagrams (ECONNREFUSED): producers skip it, the next master to start in
  that directory unlinks it.

Security: the sockets are mode 0666, so any local user can send to them. What a
sender can do is make the master wake an idle child sooner, which then runs one claim
query and goes idle again if nothing is due. Names are only compared with the
configured pool names, never used otherwise; datagram size, datagrams per drain and
names per drain are capped, so a hostile flood costs the master bounded work per loop
turn and can at worst fill the socket's queue, which makes legitimate nudges fall
back to the poll.

Turning it off (e.g. to measure the other-host path): `Queue(url, wake=False)`, or
`FORKQ_WAKE=0` in the producer's environment when the Queue is made (no datagram) or in
the daemon's (no socket).

The package: places.py (where sockets live, the database key), listener.py (the
master's socket), nudger.py (the producer's datagram).
"""

from __future__ import annotations

from supervisor.wake.listener import WakeListener, listen, sweep_stale
from supervisor.wake.nudger import Nudger, nudge
from supervisor.wake.places import (
    ENV_RUNTIME_DIR,
    ENV_WAKE,
    MAX_DATAGRAM,
    MAX_DATAGRAMS_PER_DRAIN,
    MAX_NAME_BYTES,
    MAX_NAMES_PER_DRAIN,
    MAX_SOCKETS,
    RELIST_AFTER,
    SOCKET_SUFFIX,
    SYSTEM_RUNTIME_DIR,
    daemon_runtime_dir,
    database_identity,
    database_key,
    enabled,
    producer_dirs,
    store_identity,
    user_runtime_dir,
)

__all__ = [
    "ENV_RUNTIME_DIR",
    "ENV_WAKE",
    "MAX_DATAGRAM",
    "MAX_DATAGRAMS_PER_DRAIN",
    "MAX_NAMES_PER_DRAIN",
    "MAX_NAME_BYTES",
    "MAX_SOCKETS",
    "RELIST_AFTER",
    "SOCKET_SUFFIX",
    "SYSTEM_RUNTIME_DIR",
    "Nudger",
    "WakeListener",
    "daemon_runtime_dir",
    "database_identity",
    "database_key",
    "enabled",
    "listen",
    "nudge",
    "producer_dirs",
    "store_identity",
    "sweep_stale",
    "user_runtime_dir",
]  # fmt: skip
