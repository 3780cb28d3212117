"""The dashboard's store reads and bulk actions on both backends, its paging and its pure
parts (the chart, the session signing, the listen check), without a browser."""

from __future__ import annotations

import pytest
from util import backend_of, sql

from supervisor import Queue
from supervisor.building import build_job
from supervisor.config import build_config
from supervisor.errors import ConfigError
from supervisor.models import Throughput
from supervisor.store import Store
from supervisor.web import listing
from supervisor.web.chart import nice_ceiling, throughput_chart
from supervisor.web.listing import Filters, job_page
from supervisor.web.security import Guard, is_loopback_host
from supervisor.web.server import listen_address

OWNER = "web-host:4242:cafe"


def fill(producer: Queue, count: int, **options: object) -> list[int]:
    return producer.enqueue_many(
        [{"handler": "t.job", "payload": {"n": n}, **options} for n in range(count)]
    )


def test_pages_walk_every_job_newest_first_by_id(queue: Queue, store: Store) -> None:
    ids = fill(queue, 7)
    seen, before = [], None
    while True:
        page = job_page(store, Filters(), before, limit=3)
        seen += [j.id for j in page.jobs]
        if page.older is None:
            break
        before = page.older
    assert seen == sorted(ids, reverse=True)


def test_a_sparse_filter_reads_one_window_per_page_and_says_where_it_stopped(
    queue: Queue, store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "WINDOW", 10)
    ids = fill(queue, 30)
    rare = queue.enqueue("rare.job", {}, queue="default")
    older_rare = ids[3]
    sql(db_url, "UPDATE forkq_jobs SET handler = 'rare.job' WHERE id = ?", (older_rare,))
    page = job_page(store, Filters(handler="rare.job"), None, limit=5)
    assert [j.id for j in page.jobs] == [rare]
    assert page.searched_down_to == page.older == rare + 1 - 10
    found = []
    while page.older is not None:
        found += [j.id for j in page.jobs]
        page = job_page(store, Filters(handler="rare.job"), page.older, limit=5)
    found += [j.id for j in page.jobs]
    assert found == [rare, older_rare]


def test_a_status_with_few_jobs_is_paged_from_its_index(queue: Queue, store: Store) -> None:
    ids = fill(queue, 5, queue="mail")
    fill(queue, 5, queue="other")
    for job_id in ids[:3]:
        assert store.claim("mail", OWNER, 1, 60)[0].id == job_id
        assert store.fail(OWNER, job_id, "boom", dead=True)
    assert store.count_status("dead", "mail", 100) == 3
    assert store.count_status("dead", None, 2) == 3  # cap + 1: "more than 2"
    page = job_page(store, Filters(queue="mail", status="dead"), None, limit=2)
    assert [j.id for j in page.jobs] == [ids[2], ids[1]] and page.older == ids[1]
    page = job_page(store, Filters(queue="mail", status="dead"), page.older, limit=2)
    assert [j.id for j in page.jobs] == [ids[0]] and page.older is None


def test_throughput_is_summed_over_hosts_per_minute_and_queue(store: Store, db_url: str) -> None:
    minute = (int(store.db_now()) // 60 - 1) * 60
    at = "FROM_UNIXTIME(?)" if backend_of(db_url) == "mysql" else "?"
    for row in [(minute, "a", "h1", 3, 1), (minute, "a", "h2", 4, 0), (minute, "b", "h1", 1, 1)]:
        sql(db_url, f"INSERT INTO forkq_throughput VALUES ({at}, ?, ?, ?, ?)", row)
    sql(db_url, f"INSERT INTO forkq_throughput VALUES ({at}, 'a', 'h1', 50, 50)", (minute - 7200,))
    assert store.throughput(3600) == [
        Throughput(float(minute), "a", 7, 1),
        Throughput(float(minute), "b", 1, 1),
    ]


def test_discard_and_retry_every_dead_job_of_a_queue_in_chunks(
    queue: Queue, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import supervisor.store.core as core
    import supervisor.store.operators as operators

    monkeypatch.setattr(core, "PURGE_CHUNK", 2)
    monkeypatch.setattr(operators, "PURGE_CHUNK", 2)
    for name in ("a", "b"):
        fill(queue, 5, queue=name)
        for row in store.claim(name, OWNER, 5, 60):
            assert store.fail(OWNER, row.id, "boom", dead=True)
    assert store.retry_dead("a") == (5, [])
    assert store.count_status("dead", "a", 10) == 0 and store.count_status("ready", "a", 10) == 5
    assert store.discard_queue_dead("b") == 5
    assert store.count_status("dead", "b", 10) == 0
    waiting = queue.enqueue("t.job", {}, queue="a")
    assert store.discard_dead_jobs([waiting]) == 0  # only dead jobs are discarded


def test_a_jobs_listing_names_its_lease_holders_host_and_pid(queue: Queue, store: Store) -> None:
    job_id = queue.enqueue("t.job", {"x": 1}, queue="q")
    store.claim("q", OWNER, 1, 60)
    store.register_process(OWNER, "web-host", 4242, "worker", pool="q")
    row = store.job_listing(job_id)
    assert row is not None and (row.host, row.pid, row.status) == ("web-host", 4242, "running")
    assert [(j.id, j.host) for j in store.running_jobs()] == [(job_id, "web-host")]
    assert store.job_listing(job_id + 1000) is None
    keyed = queue.enqueue("t.job", {}, unique_key="k-1")
    assert store.job_id_by_key("k-1") == keyed and store.job_id_by_key("k-2") is None


def test_schedule_slots_newest_first(store: Store) -> None:
    job = build_job("t.job", {}, "q", 0.0, None, 0, None, None)
    for slot in (1_700_000_000.0, 1_700_000_060.0):
        store.enqueue_slot("s", slot, job)
    assert [slot for slot, _ in store.schedule_slots("s")] == [1_700_000_060.0, 1_700_000_000.0]


# --- pure parts ----------------------------------------------------------------------------------


def test_the_chart_places_done_below_failed_and_sums_per_bucket() -> None:
    now = 1_700_000_000.0
    minute = now // 60 * 60
    chart = throughput_chart(
        [Throughput(minute, "a", 30, 10), Throughput(minute, "b", 10, 0)], now, 1
    )
    [bar] = chart.bars
    assert bar.title.endswith("40 done, 10 failed")
    assert bar.failed_y + bar.failed_h == pytest.approx(bar.done_y)
    assert chart.done == 40 and chart.failed == 10
    assert [nice_ceiling(v) for v in (0, 3, 7, 120)] == [1.0, 5.0, 10.0, 200.0]
    long = throughput_chart([Throughput(minute - 60 * m, "a", 1, 0) for m in range(1440)], now, 24)
    assert long.bucket_minutes == 4 and len(long.bars) <= 360


def test_sessions_and_csrf_tokens_are_signed_and_expire() -> None:
    guard = Guard("a-long-enough-token-value")
    session = guard.login()
    cookie = guard.encode(session)
    assert guard.decode(cookie) == session.__class__(session.sid, session.issued, True)
    assert guard.decode(cookie.replace(".1.", ".0.")) is None  # tampered
    assert guard.decode(cookie, now=session.issued + 13 * 3600) is None  # expired
    assert Guard("another-long-token-value").decode(cookie) is None  # a new token ends sessions
    assert guard.csrf_ok(session, guard.csrf_token(session))
    assert not guard.csrf_ok(session, guard.csrf_token(guard.login()))
    assert guard.read_flash(guard.sign_flash("done <b>")) == "done <b>"
    assert guard.read_flash("ZXZpbA.forged") is None


def test_loopback_rules_and_the_web_config_section() -> None:
    assert all(map(is_loopback_host, ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback_host, ["0.0.0.0", "::", "10.0.0.1", "example.com"]))
    assert listen_address("127.0.0.1:8740", None) == ("127.0.0.1", 8740)
    assert listen_address("0.0.0.0:8740", "x" * 16) == ("0.0.0.0", 8740)
    with pytest.raises(ConfigError, match="FORKQ_WEB_TOKEN"):
        listen_address("0.0.0.0:8740", None)
    config = build_config({"web": {"listen": "[::1]:9000", "read_only": True}}, "f.toml")
    assert (config.web.listen, config.web.read_only) == ("[::1]:9000", True)
    with pytest.raises(ConfigError) as problems:
        build_config({"web": {"listen": "nope", "read_only": "yes", "port": 1}}, "f.toml")
    text = str(problems.value)
    assert "web.listen" in text and "web.read_only" in text and "web.port: unknown key" in text
