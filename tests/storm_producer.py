"""One producer of the enqueue storm (tests/faults/test_faults_storm.py), run as its own process.

    python storm_producer.py MODE URL COUNT RECORD_FILE RESULT_FILE

MODE `queue` enqueues through `Queue.enqueue` (forkq's own session: its isolation level,
its retries on a deadlock); MODE `raw` sends the documented one-line INSERT on a plain
PyMySQL connection that keeps every server default (autocommit on, the server's
isolation level: REPEATABLE READ on a stock MariaDB), as a PHP or Ruby app would, and
has no retry loop: any error is a failed enqueue.

Every job is a `t.record` job writing to RECORD_FILE. The producer connects, prints
`ready`, waits for a line on stdin (so all producers start together), enqueues COUNT
jobs one by one, and writes a JSON result to RESULT_FILE: the ids it got back, how
many enqueues failed and with which errors.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

import pymysql

from supervisor import Queue
from supervisor.dburl import parse_database_url

HANDLER = "t.record"
QUEUE = "work"
RAW_INSERT = "INSERT INTO forkq_jobs (queue, handler, payload) VALUES (%s, %s, %s)"


def describe(exc: BaseException) -> str:
    """`Type: code message` of a failed enqueue, short enough to count alike errors."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"


class RawProducer:
    """A non-Python app's producer: one connection, server defaults, no retries."""

    def __init__(self, url: str) -> None:
        self.url = parse_database_url(url)
        self.conn = self.connect()

    def connect(self) -> Any:
        return pymysql.connect(
            host=self.url.host,
            port=self.url.port,
            user=self.url.user,
            password=self.url.password,
            database=self.url.database,
            charset="utf8mb4",
            autocommit=None,  # the server's default (on): one statement, one transaction
            connect_timeout=5,
            read_timeout=60,
            write_timeout=60,
        )

    def isolation(self) -> str:
        with self.conn.cursor() as cursor:
            cursor.execute("SELECT @@tx_isolation")
            return str(cursor.fetchone()[0])

    def enqueue(self, payload: str) -> int:
        try:
            with self.conn.cursor() as cursor:
                cursor.execute(RAW_INSERT, (QUEUE, HANDLER, payload))
                return int(cursor.lastrowid)
        except pymysql.err.OperationalError:
            if not self.conn.open:  # an app reconnects for its next request
                self.conn = self.connect()
            raise

    def close(self) -> None:
        self.conn.close()


def main(argv: list[str]) -> int:
    mode, url, count, record, result_path = argv[1], argv[2], int(argv[3]), argv[4], argv[5]
    payload = {"file": record}
    raw = RawProducer(url) if mode == "raw" else None
    queue = Queue(url) if mode == "queue" else None
    isolation = raw.isolation() if raw else "forkq session"
    if queue is not None:
        queue.store.server_version()  # connect now, not in the race
    print("ready", flush=True)
    sys.stdin.readline()  # the go signal

    ids: list[int] = []
    errors: Counter[str] = Counter()
    started = time.monotonic()
    text = json.dumps(payload)
    for _ in range(count):
        try:
            if raw is not None:
                ids.append(raw.enqueue(text))
            else:
                assert queue is not None
                ids.append(queue.enqueue(HANDLER, payload, queue=QUEUE))
        except Exception as exc:  # every error is a failed enqueue: count it and go on
            errors[describe(exc)] += 1
    elapsed = time.monotonic() - started
    result = {
        "mode": mode,
        "isolation": isolation,
        "ids": ids,
        "failed": sum(errors.values()),
        "errors": dict(errors),
        "seconds": round(elapsed, 2),
    }
    with open(result_path, "w", encoding="utf-8") as out:
        json.dump(result, out)
    if raw is not None:
        raw.close()
    if queue is not None:
        queue.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
