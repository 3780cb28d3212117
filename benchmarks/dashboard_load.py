"""How long the dashboard's pages take with 1M jobs in the table (issue 14's note).

A private mariadbd (tests/private_mariadb.py's launcher: its own data directory, loopback
port, the default 64 MiB buffer pool of that launcher), never the shared server. It loads
JOBS rows with one INSERT ... SELECT over MariaDB's sequence engine (four queues; ready,
scheduled, dead, done and a few running; a rare handler), a day of forkq_throughput for
three hosts, starts `forkq web` with waitress, and times each page over HTTP (the median
of ROUNDS loads after one warm-up).

    .venv/bin/python benchmarks/dashboard_load.py [JOBS]
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pymysql

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from private_mariadb import PrivateMariaDB  # noqa: E402
from util import dies_with_us, free_tcp_port, python, subprocess_env  # noqa: E402

ROUNDS = 5
CHUNK = 100_000  # rows per INSERT ... SELECT
PAGES = [
    "/",
    "/api/status",
    "/jobs",
    "/jobs?queue=email",
    "/jobs?handler=rare.handler",
    "/jobs?status=dead&queue=billing",
    "/dead",
    "/running",
    "/queues",
]

LOAD = """
INSERT INTO forkq_jobs (queue, handler, payload, status, priority, run_at, attempts,
                        enqueued_at, finished_at, last_error)
SELECT ELT(1 + seq % 4, 'email', 'reports', 'billing', 'search'),
       IF(seq % 100000 = 7, 'rare.handler', ELT(1 + seq % 3, 'mail.send', 'report.build', 'bill.charge')),
       CONCAT('{"n": ', seq, ', "to": "user', seq, '@example.com"}'),
       CASE WHEN seq % 10 < 6 THEN 'ready' WHEN seq % 10 < 8 THEN 'scheduled'
            WHEN seq % 10 = 8 THEN 'dead' ELSE 'done' END,
       seq % 3,
       IF(seq % 10 BETWEEN 6 AND 7, NOW(6) + INTERVAL 1 DAY, NOW(6) - INTERVAL (seq % 3600) SECOND),
       IF(seq % 10 = 8, 10, 0),
       NOW(6) - INTERVAL (seq % 7200) SECOND,
       IF(seq % 10 >= 8, NOW(6), NULL),
       IF(seq % 10 = 8, 'Traceback: ValueError: it broke', NULL)
FROM seq_{first}_to_{last}
"""
THROUGHPUT = """
INSERT INTO forkq_throughput (minute, queue, host, done, failed)
SELECT FROM_UNIXTIME((UNIX_TIMESTAMP() DIV 60 - m.seq) * 60), q.name, h.name,
       40 + (m.seq * 7) % 60, (m.seq * 3) % 5
FROM seq_0_to_1439 m
CROSS JOIN (SELECT 'email' AS name UNION ALL SELECT 'reports' UNION ALL SELECT 'billing'
            UNION ALL SELECT 'search') q
CROSS JOIN (SELECT 'app1' AS name UNION ALL SELECT 'app2' UNION ALL SELECT 'app3') h
"""


def load(server: PrivateMariaDB, jobs: int) -> None:
    started = time.monotonic()
    conn = pymysql.connect(
        unix_socket=server.socket, user="root", database=server.database, read_timeout=900
    )
    try:
        with conn.cursor() as cursor:
            for first in range(1, jobs + 1, CHUNK):  # one transaction per chunk
                last = min(jobs, first + CHUNK - 1)
                cursor.execute(LOAD.replace("{first}", str(first)).replace("{last}", str(last)))
                conn.commit()
            cursor.execute(
                "UPDATE forkq_jobs SET status = 'running', locked_by = 'app1:1:x',"
                " started_at = NOW(6), locked_until = NOW(6) + INTERVAL 1 HOUR"
                " WHERE status = 'ready' AND queue = 'email' LIMIT 40"
            )
            cursor.execute(THROUGHPUT)
            cursor.execute("ANALYZE TABLE forkq_jobs")
        conn.commit()
    finally:
        conn.close()
    print(f"loaded {jobs:,} jobs in {time.monotonic() - started:.0f}s", flush=True)


def timed(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        response.read()
        assert response.status == 200, (url, response.status)
    return time.perf_counter() - started


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    server = PrivateMariaDB()
    web = None
    try:
        server.start()
        server.setup_forkq()
        load(server, jobs)
        port = free_tcp_port()
        config = server.root / "forkq.toml"
        config.write_text("[supervisor]\nhandlers = []\n[pools.email]\n[pools.reports]\n")
        web = subprocess.Popen(
            [
                python(),
                "-m",
                "supervisor",
                "web",
                "-c",
                str(config),
                "--listen",
                f"127.0.0.1:{port}",
            ],
            env=subprocess_env(server.url),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=dies_with_us(signal.SIGTERM),
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                timed(base + "/static/dashboard.css")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        print(f"{'page':40} {'median':>9} {'max':>9}")
        for page in PAGES:
            timed(base + page)  # warm-up
            times = [timed(base + page) for _ in range(ROUNDS)]
            print(f"{page:40} {statistics.median(times) * 1000:8.0f}ms {max(times) * 1000:8.0f}ms")
    finally:
        if web is not None and web.poll() is None:
            os.killpg(web.pid, signal.SIGTERM)
            web.wait(timeout=10)
        server.destroy()


if __name__ == "__main__":
    main()
