"""The pure alert decisions: fixed snapshots, fixed times, no I/O."""

from __future__ import annotations

from dataclasses import replace

from supervisor.cluster.alerts.rules import evaluate
from supervisor.cluster.alerts.states import AlertState, Notification, Snapshot, stats_cap
from supervisor.config import AlertRule, AlertsConfig, build_config
from supervisor.durations import format_duration as age
from supervisor.models import QueueStats

T0 = 1_700_000_000.0
COOLDOWN = 900.0
HOST = "app1"


def cfg(**rules: AlertRule) -> AlertsConfig:
    return AlertsConfig(cooldown=COOLDOWN, defaults=AlertRule(max_ready=1000), rules=rules)


def snap(*queues: QueueStats, **kw: object) -> Snapshot:
    return Snapshot(host=HOST, queues=list(queues), **kw)  # type: ignore[arg-type]


class Run:
    """Feed snapshots through evaluate, carrying the states, as the runner would."""

    def __init__(self, rules: AlertsConfig) -> None:
        self.rules = rules
        self.states: dict[str, AlertState] = {}

    def tick(self, snapshot: Snapshot, now: float) -> list[Notification]:
        self.states, notes = evaluate(snapshot, self.rules, self.states, now)
        return notes


def email(ready: int = 0, age_s: float = 0.0, dead: int = 0, paused: bool = False) -> QueueStats:
    return QueueStats(queue="email", ready=ready, oldest_ready_age=age_s, dead=dead, paused=paused)


def test_max_ready_fires_above_the_threshold_not_at_it() -> None:
    run = Run(cfg())
    assert run.tick(snap(email(ready=1000)), T0) == []
    notes = run.tick(snap(email(ready=1001, age_s=432)), T0 + 10)
    assert [(n.key, n.kind) for n in notes] == [("max_ready:email", "firing")]
    assert run.states["max_ready:email"].firing


def test_message_names_host_queue_figure_threshold_and_age() -> None:
    run = Run(cfg())
    (note,) = run.tick(snap(email(ready=1523, age_s=432)), T0)
    assert (
        note.text
        == '[forkq] app1: queue "email" backlog 1523 ready > max_ready 1000 (oldest waited 7m12s)'
    )
    assert "http" not in note.text


def test_cooldown_suppresses_repeats_then_reminds_once() -> None:
    run = Run(cfg())
    assert len(run.tick(snap(email(ready=2000)), T0)) == 1
    for t in range(10, int(COOLDOWN), 10):
        assert run.tick(snap(email(ready=2000 + t)), T0 + t) == [], t
    (reminder,) = run.tick(snap(email(ready=3000)), T0 + COOLDOWN)
    assert reminder.kind == "reminder"
    assert "still firing (for 15m)" in reminder.text and "3000 ready" in reminder.text
    assert run.tick(snap(email(ready=3000)), T0 + COOLDOWN + 10) == []


def test_resolved_is_sent_once_when_it_clears() -> None:
    run = Run(cfg())
    run.tick(snap(email(ready=1523)), T0)
    (note,) = run.tick(snap(email(ready=12)), T0 + 60)
    assert note.kind == "resolved"
    assert note.text == '[forkq] app1: resolved: queue "email" backlog 12 ready <= 1000'
    assert run.tick(snap(email(ready=12)), T0 + 70) == []
    assert run.tick(snap(email(ready=3)), T0 + 5000) == []
    assert run.states["max_ready:email"].state == "ok"
    # The row keeps the words of its end (the dashboard shows them), and its firing text.
    detail = run.states["max_ready:email"].detail
    assert detail["resolved_text"] == note.text and "> max_ready 1000" in detail["text"]


def test_a_drained_queue_with_no_rows_resolves_its_alert() -> None:
    run = Run(cfg())
    run.tick(snap(email(ready=5000)), T0)
    (note,) = run.tick(snap(), T0 + 10)  # stats list no row for an empty queue
    assert note.kind == "resolved" and "backlog 0 ready" in note.text


def test_flapping_around_the_threshold_is_held_back_by_the_cooldown() -> None:
    run = Run(cfg())
    sent = []
    for i in range(60):  # above, below, above, ... every 10 s for 10 minutes
        sent += run.tick(snap(email(ready=1500 if i % 2 == 0 else 500)), T0 + 10 * i)
    assert [n.kind for n in sent] == ["firing", "resolved"]
    sent = run.tick(snap(email(ready=1500)), T0 + 10 + COOLDOWN)
    assert [n.kind for n in sent] == ["firing"]


def test_an_alert_held_back_and_cleared_resolves_silently() -> None:
    run = Run(cfg())
    run.tick(snap(email(ready=1500)), T0)
    run.tick(snap(email(ready=10)), T0 + 10)
    assert run.tick(snap(email(ready=1500)), T0 + 20) == []  # held back
    assert run.tick(snap(email(ready=10)), T0 + 30) == []  # nobody was told it came back


def test_per_queue_rule_overrides_defaults() -> None:
    rules = build_config(
        {"alerts": {"defaults": {"max_ready": 1000}, "rules": {"email": {"max_ready": 10}}}},
        "t.toml",
    ).alerts
    run = Run(AlertsConfig(cooldown=COOLDOWN, defaults=rules.defaults, rules=rules.rules))
    other = QueueStats(queue="reports", ready=500)
    notes = run.tick(snap(email(ready=11), other), T0)
    assert [n.key for n in notes] == ["max_ready:email"]
    assert "max_ready 10" in notes[0].text
    notes = run.tick(snap(email(ready=11), QueueStats(queue="reports", ready=1001)), T0 + 10)
    assert [n.key for n in notes] == ["max_ready:reports"]


def test_a_queue_rule_without_a_threshold_is_off() -> None:
    run = Run(AlertsConfig(cooldown=COOLDOWN))
    assert run.tick(snap(email(ready=10**6, age_s=10**5, dead=10**4)), T0) == []
    assert run.states == {}


def test_an_age_just_over_max_age_is_not_shown_as_equal_to_it() -> None:
    run = Run(cfg(email=AlertRule(max_age=30.0)))
    (note,) = run.tick(snap(email(ready=1, age_s=30.4)), T0)
    assert "waited 30.4s > max_age 30s" in note.text, note.text


def test_max_age_fires_on_an_old_ready_job() -> None:
    run = Run(cfg(email=AlertRule(max_age=300.0)))
    assert run.tick(snap(email(ready=3, age_s=300)), T0) == []
    (note,) = run.tick(snap(email(ready=3, age_s=301)), T0 + 10)
    assert (
        note.text
        == '[forkq] app1: queue "email" oldest ready job waited 5m01s > max_age 5m (3 ready)'
    )
    (note,) = run.tick(snap(email(ready=0)), T0 + 20)
    assert note.kind == "resolved" and "<= 5m" in note.text


def test_max_dead_fires_on_new_dead_jobs_only() -> None:
    run = Run(cfg(email=AlertRule(max_dead=0)))
    assert run.tick(snap(email(dead=0)), T0) == []
    (note,) = run.tick(snap(email(dead=1)), T0 + 10)
    assert note.kind == "firing"
    assert note.text.startswith(
        '[forkq] app1: queue "email" 1 new dead job > max_dead 0 (1 dead in all'
    )
    # the same dead job does not repeat, not even after the cooldown
    assert run.tick(snap(email(dead=1)), T0 + 20) == []
    # no new death for a cooldown: this wave is over, the baseline moves up to 1
    (note,) = run.tick(snap(email(dead=1)), T0 + 10 + COOLDOWN)
    assert note.kind == "resolved" and "no new dead jobs for 15m (1 dead in all)" in note.text
    assert run.tick(snap(email(dead=1)), T0 + 20 + 3 * COOLDOWN) == []
    # a new one fires again (the last message was long enough ago)
    (note,) = run.tick(snap(email(dead=2)), T0 + 30 + 3 * COOLDOWN)
    assert (
        note.kind == "firing" and "1 new dead job >" in note.text and "2 dead in all" in note.text
    )


def test_max_dead_reminds_only_when_more_jobs_died() -> None:
    run = Run(cfg(email=AlertRule(max_dead=0)))
    run.tick(snap(email(dead=1)), T0)
    assert run.tick(snap(email(dead=5)), T0 + 600) == []  # within the cooldown
    (note,) = run.tick(snap(email(dead=5)), T0 + COOLDOWN)
    assert note.kind == "reminder" and "5 new dead jobs" in note.text
    assert run.tick(snap(email(dead=5)), T0 + COOLDOWN + 10) == []


def test_max_dead_threshold_counts_new_ones_above_it() -> None:
    run = Run(cfg(email=AlertRule(max_dead=3)))
    assert run.tick(snap(email(dead=3)), T0) == []
    assert [n.kind for n in run.tick(snap(email(dead=4)), T0 + 10)] == ["firing"]


def test_max_dead_drop_resolves_and_lowers_the_baseline() -> None:
    run = Run(cfg(email=AlertRule(max_dead=0)))
    run.tick(snap(email(dead=4)), T0)
    (note,) = run.tick(snap(email(dead=0)), T0 + 10)  # forkq retry --dead
    assert note.kind == "resolved" and "dead jobs down to 0" in note.text
    assert run.states["max_dead:email"].detail["baseline"] == 0
    # a job dying again within the cooldown of the last message is held back, then told
    assert run.tick(snap(email(dead=1)), T0 + 20) == []
    (note,) = run.tick(snap(email(dead=1)), T0 + 10 + COOLDOWN)
    assert note.kind == "firing" and "1 new dead job >" in note.text


def test_a_held_back_max_dead_message_is_not_resolved_right_after_it_goes_out() -> None:
    """Seen: fired, resolved by a retry, the job died again within the cooldown (held
    back), told a cooldown later, and "resolved" 5 s after that: two messages saying
    nothing new back to back, where the promise is one per alert per cooldown."""
    run = Run(cfg(email=AlertRule(max_dead=0)))
    run.tick(snap(email(dead=1)), T0)
    assert [n.kind for n in run.tick(snap(email(dead=0)), T0 + 60)] == ["resolved"]  # retried
    assert run.tick(snap(email(dead=1)), T0 + 64) == []  # died again: held back
    (note,) = run.tick(snap(email(dead=1)), T0 + 60 + COOLDOWN)
    assert note.kind == "firing"
    assert run.tick(snap(email(dead=1)), T0 + 65 + COOLDOWN) == []  # not resolved at once
    (note,) = run.tick(snap(email(dead=1)), T0 + 60 + 2 * COOLDOWN)
    assert note.kind == "resolved" and "(1 dead in all)" in note.text


def capped(q: QueueStats, *counts: str) -> QueueStats:
    """`q` as Store.stats reports it when these counts stopped at the cap (lower bounds)."""
    return replace(q, capped=frozenset(counts))


def test_a_capped_ready_count_is_a_lower_bound() -> None:
    run = Run(cfg())
    (note,) = run.tick(snap(capped(email(ready=1000, age_s=60), "ready")), T0)  # more than 1000
    assert note.kind == "firing" and "backlog 1000+ ready > max_ready 1000" in note.text
    # a cap under the threshold tells nothing: the alert neither resolves nor fires
    assert run.tick(snap(capped(email(ready=500), "ready")), T0 + 10) == []
    assert run.states["max_ready:email"].firing
    assert [n.kind for n in run.tick(snap(email(ready=500)), T0 + 20)] == ["resolved"]
    quiet = Run(cfg())
    assert quiet.tick(snap(capped(email(ready=500), "ready")), T0) == []
    assert "max_ready:email" not in quiet.states


def test_max_dead_past_the_cap_fires_when_sure_and_never_resolves_for_quiet() -> None:
    run = Run(cfg(email=AlertRule(max_dead=0)))
    run.tick(snap(email(dead=9_995)), T0)
    (note,) = run.tick(snap(email(dead=9_995)), T0 + COOLDOWN)
    assert note.kind == "resolved"  # quiet for a cooldown: the baseline moves up to 9,995
    # more died, and the count stops at the cap: at least 5 new ones
    (note,) = run.tick(snap(capped(email(dead=10_000), "dead")), T0 + 3 * COOLDOWN)
    assert note.kind == "firing" and "5+ new dead jobs > max_dead 0 (10000+ dead" in note.text
    # past the cap new deaths cannot be seen: no quiet resolution, a reminder instead
    (note,) = run.tick(snap(capped(email(dead=10_000), "dead")), T0 + 4 * COOLDOWN + 10)
    assert note.kind == "reminder"
    assert run.states["max_dead:email"].detail["baseline"] == 9_995
    # retried: the exact count is back, under the cap
    (note,) = run.tick(snap(email(dead=0)), T0 + 5 * COOLDOWN)
    assert note.kind == "resolved" and "dead jobs down to 0" in note.text


def test_max_dead_past_the_cap_does_not_fire_on_a_bound_within_the_threshold() -> None:
    run = Run(cfg(email=AlertRule(max_dead=10)))
    run.tick(snap(email(dead=9_995)), T0)
    run.tick(snap(email(dead=9_995)), T0 + COOLDOWN)  # resolved: baseline 9,995
    # at least 5 new: perhaps more than 10, perhaps not
    assert run.tick(snap(capped(email(dead=10_000), "dead")), T0 + 3 * COOLDOWN) == []
    assert not run.states["max_dead:email"].firing


def test_the_check_tick_cap_passes_every_alert_threshold() -> None:
    assert stats_cap(AlertsConfig()) == 10_000
    rules = AlertsConfig(
        defaults=AlertRule(max_ready=1000, max_dead=0),
        rules={"bulk": AlertRule(max_ready=50_000), "dying": AlertRule(max_dead=20_000)},
    )
    assert stats_cap(rules) == 50_001


def test_saturation_fires_after_n_ticks() -> None:
    run = Run(cfg(email=AlertRule(saturated_ticks=6)))
    for ticks in range(6):
        assert run.tick(snap(saturated_ticks={"email": ticks}), T0 + ticks) == []
    (note,) = run.tick(snap(saturated_ticks={"email": 6}), T0 + 6)
    assert note.key == "saturated:app1:email"
    assert note.text == (
        '[forkq] app1: pool "email" saturated: all max_workers busy with a backlog for 6 checks >= saturated_ticks 6'
    )
    (note,) = run.tick(snap(saturated_ticks={}), T0 + 7)
    assert note.kind == "resolved" and 'pool "email" no longer saturated' in note.text


def test_crash_loop_is_always_on() -> None:
    run = Run(AlertsConfig(cooldown=COOLDOWN))
    (note,) = run.tick(snap(crash_looping={"email"}), T0)
    assert note.key == "crash_loop:app1:email"
    assert note.text.startswith('[forkq] app1: pool "email" crash-looping')
    assert run.tick(snap(crash_looping={"email"}), T0 + 10) == []
    (note,) = run.tick(snap(), T0 + 20)
    assert note.kind == "resolved"


def test_database_unreachable_is_always_on_and_freezes_queue_alerts() -> None:
    run = Run(cfg())
    run.tick(snap(email(ready=5000)), T0)
    (note,) = run.tick(
        snap(db_error="(2003) Can't connect to MySQL server on '127.0.0.1'"), T0 + 10
    )
    assert note.key == "db_unreachable:app1"
    assert (
        note.text
        == "[forkq] app1: database unreachable: (2003) Can't connect to MySQL server on '127.0.0.1'"
    )
    assert run.states["max_ready:email"].firing  # figures unknown: neither fired nor resolved
    notes = run.tick(snap(email(ready=5000)), T0 + 20)
    assert [(n.key, n.kind) for n in notes] == [("db_unreachable:app1", "resolved")]
    assert notes[0].text == "[forkq] app1: resolved: database reachable again"


def test_a_host_without_the_lease_judges_only_its_own_rules() -> None:
    run = Run(cfg())
    notes = run.tick(snap(email(ready=5000), crash_looping={"email"}, cluster=False), T0)
    assert [n.key for n in notes] == ["crash_loop:app1:email"]


def test_another_hosts_rules_are_left_alone() -> None:
    run = Run(cfg())
    other = Snapshot(host="app2", queues=[], crash_looping={"email"})
    run.states, notes = evaluate(other, run.rules, run.states, T0)
    assert [n.key for n in notes] == ["crash_loop:app2:email"]
    assert run.tick(snap(), T0 + 10) == []
    assert run.states["crash_loop:app2:email"].firing


def test_paused_queue_is_named_paused_in_the_message() -> None:
    run = Run(cfg())
    (note,) = run.tick(snap(email(ready=2000, paused=True)), T0)
    assert 'queue "email" (paused) backlog 2000' in note.text


def test_state_round_trips_through_the_store_shape() -> None:
    run = Run(cfg(email=AlertRule(max_dead=0)))
    run.tick(snap(email(ready=2000, dead=2)), T0)
    for key, state in run.states.items():
        row = {
            "state": state.state,
            "detail": state.detail,
            "since": state.since,
            "notified_at": state.notified_at,
        }
        assert AlertState.from_store(row) == state, key


def test_age_formats_in_two_units() -> None:
    assert [age(s) for s in (0, 45, 60, 432, 3600, 7500, 86400, 97200 + 59)] == [
        "0s", "45s", "1m", "7m12s", "1h", "2h05m", "1d", "1d3h",
    ]  # fmt: skip


def test_a_reload_that_loosens_a_rule_resolves_it_in_its_own_words() -> None:
    """A HUP raised max_dead past the new dead jobs, or removed saturated_ticks: the alert
    resolved as "no new dead jobs for 16s" and "no longer saturated", neither true."""
    run = Run(cfg(email=AlertRule(max_dead=0, saturated_ticks=2)))
    notes = run.tick(snap(email(dead=3), saturated_ticks={"email": 2}), T0)
    assert sorted(n.kind for n in notes) == ["firing", "firing"]
    run.rules = cfg(email=AlertRule(max_dead=10))
    notes = run.tick(snap(email(dead=3), saturated_ticks={"email": 3}), T0 + 10)
    texts = sorted(n.text for n in notes if n.kind == "resolved")
    assert texts == [
        '[forkq] app1: resolved: pool "email" saturated_ticks rule removed',
        '[forkq] app1: resolved: queue "email" 3 new dead <= max_dead 10 (3 dead in all)',
    ], notes
