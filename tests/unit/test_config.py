"""The TOML config: the shipped example loads, and every way a file can be wrong is one
clear ConfigError (exit status 78) naming the file and each bad key."""

from __future__ import annotations

import math
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config import Config, build_config, load_config
from supervisor.dburl import parse_database_url
from supervisor.errors import ConfigError, ExitCode

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "forkq.toml"
POOL_KEYS = [
    "workers",
    "max_workers",
    "timeout",
    "max_jobs_per_child",
    "max_child_lifetime",
    "memory_limit_mb",
    "on_success",
    "retention",
    "claim_batch",
]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own FORKQ_* variables must not leak into what is tested."""
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)
    monkeypatch.delenv("FORKQ_SMTP_PASSWORD", raising=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "forkq.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems(path: Path) -> list[str]:
    """The lines of the ConfigError that loading `path` must raise."""
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.exit_code == ExitCode.CONFIG
    return str(caught.value).splitlines()


# --- the shipped example -------------------------------------------------------------------


def test_the_example_config_loads_as_documented() -> None:
    config = load_config(EXAMPLE)
    assert config.source == str(EXAMPLE)
    assert config.database.backend == "sqlite"
    assert config.database.path == "var/forkq.db"
    assert config.supervisor.handlers == ("handlers.demo",)
    assert config.supervisor.check_interval == 5
    assert config.supervisor.shutdown_timeout == 10
    pools = {pool.name: pool for pool in config.pools}
    assert set(pools) == {"default", "email", "reports"}
    assert (pools["default"].workers, pools["default"].max_workers, pools["default"].timeout) == (
        2,
        4,
        30,
    )
    assert (pools["email"].workers, pools["email"].max_workers, pools["email"].timeout) == (
        1,
        3,
        20,
    )
    assert pools["reports"].max_workers == 1  # no max_workers: a static pool
    assert (pools["reports"].on_success, pools["reports"].retention) == ("keep", 3600)
    assert config.alerts.webhook_url == "" and config.alerts.email_to == ()
    defaults = config.alerts.defaults
    assert (defaults.max_ready, defaults.max_age, defaults.max_dead) == (1000, 300, 0)
    [heartbeat] = config.schedules
    assert (heartbeat.name, heartbeat.cron, heartbeat.handler, heartbeat.queue) == (
        "heartbeat",
        "* * * * *",
        "demo.echo",
        "default",
    )
    assert heartbeat.payload == {"msg": "tick"}


def test_the_example_schedule_targets_a_registered_handler_on_a_configured_pool() -> None:
    from supervisor import registry

    config = load_config(EXAMPLE)
    # as the daemon does at boot and on HUP; reload=True re-registers even if another
    # test cleared the registry after handlers.demo was first imported
    registry.load_modules(config.supervisor.handlers, reload=True)
    for schedule in config.schedules:
        assert registry.get(schedule.handler) is not None, schedule.handler
        assert config.pool(schedule.queue) is not None, schedule.queue


def test_no_file_means_the_built_in_defaults() -> None:
    config = load_config(None)
    assert config.source == "<defaults>"
    assert config.database.backend == "sqlite" and config.database.path == "forkq.db"
    assert [pool.name for pool in config.pools] == ["default"]


# --- every problem at once ----------------------------------------------------------------


def test_every_problem_is_reported_at_once_with_the_file_and_the_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [database]
        url = "postgres://forkq@127.0.0.1/app"

        [supervisor]
        check_intervall = 5
        shutdown_timeout = "a while"

        [pools.email]
        wokers = 2
        """,
    )
    lines = problems(path)
    assert len(lines) == 4, lines
    assert all(line.startswith(f"{path}: ") for line in lines), lines
    text = "\n".join(lines)
    for key in (
        "database.url",
        "supervisor.check_intervall",
        "supervisor.shutdown_timeout",
        "pools.email.wokers",
    ):
        assert f": {key}: " in text, key
    assert "unsupported database scheme 'postgres'" in text
    assert "unknown key" in text


def test_a_bad_url_from_the_command_line_or_environment_is_not_blamed_on_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--database` and FORKQ_DATABASE_URL are named as where the URL came from, without
    the config file's name (or "<defaults>") in front, as if the file held it."""
    bad = "mysql://forkq:pa/ss@127.0.0.1/app"
    with pytest.raises(ConfigError) as caught:
        build_config({}, "<defaults>", database_url=bad)
    assert str(caught.value).startswith("--database: database url: a '/'"), caught.value
    monkeypatch.setenv("FORKQ_DATABASE_URL", bad)
    with pytest.raises(ConfigError) as caught:
        build_config({}, str(tmp_path / "forkq.toml"))
    assert str(caught.value).startswith("FORKQ_DATABASE_URL: database url: a '/'")


def test_an_unknown_section_is_refused(tmp_path: Path) -> None:
    [line] = problems(write(tmp_path, "[pool.email]\nworkers = 2\n"))
    assert ": pool: unknown section" in line


def test_a_named_but_missing_file_is_fatal(tmp_path: Path) -> None:
    """No silent fallback to the defaults (solid_queue's anti-pattern)."""
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="file not found") as caught:
        load_config(missing)
    assert str(missing) in str(caught.value)
    assert caught.value.exit_code == ExitCode.CONFIG


def test_a_file_that_is_not_toml_names_the_file(tmp_path: Path) -> None:
    [line] = problems(write(tmp_path, "[supervisor\nhandlers = 1\n"))
    assert line.startswith(f"{tmp_path / 'forkq.toml'}: not valid TOML")


# --- the database URL ---------------------------------------------------------------------


def test_forkq_database_url_overrides_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, '[database]\nurl = "sqlite:///from-the-file.db"\n')
    monkeypatch.setenv("FORKQ_DATABASE_URL", "mysql://forkq:pw@db.internal:3307/app")
    database = load_config(path).database
    assert (database.backend, database.host, database.port, database.database) == (
        "mysql",
        "db.internal",
        3307,
        "app",
    )
    assert database.password == "pw"


def test_the_database_option_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, '[database]\nurl = "sqlite:///from-the-file.db"\n')
    monkeypatch.setenv("FORKQ_DATABASE_URL", "mysql://forkq:pw@db.internal:3307/app")
    assert load_config(path, database_url="sqlite:////tmp/cli.db").database.path == "/tmp/cli.db"


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///",
        "mysql://forkq:pw@127.0.0.1:3306/",
        "mysql://forkq:pw@127.0.0.1:99999/app",
        "redis://127.0.0.1/0",
        "just a string",
    ],
)
def test_a_bad_database_url_is_a_config_error(tmp_path: Path, url: str) -> None:
    [line] = problems(write(tmp_path, f'[database]\nurl = "{url}"\n'))
    assert ": database.url: " in line


@pytest.mark.parametrize(
    "url",
    [
        "mysql://forkq:Topsecret1@127.0.0.1:99999/app",  # bad port
        "mysql://forkq:Topsecret1@127.0.0.1:3306/",  # no database
        "postgres://forkq:Topsecret1@127.0.0.1/app",  # bad scheme
    ],
)
def test_a_bad_url_error_never_shows_the_password(tmp_path: Path, url: str) -> None:
    [line] = problems(write(tmp_path, f'[database]\nurl = "{url}"\n'))
    assert "Topsecret1" not in line


def test_redacted_url_hides_the_password_but_keeps_the_rest() -> None:
    url = parse_database_url("mysql://forkq:s3cr%40t@db.internal:3307/app")
    assert url.password == "s3cr@t"
    assert url.redacted() == "mysql://forkq:***@db.internal:3307/app"
    for shown in (url.redacted(), str(url), repr(url), f"{url}"):
        assert "s3cr" not in shown


@given(password=st.text(min_size=1, max_size=40))
def test_redacted_url_never_shows_any_password(password: str) -> None:
    secret = "Zq9" + password  # a marker no other part of the URL contains
    url = parse_database_url(f"mysql://forkq:{quote(secret, safe='')}@db.internal:3306/app")
    assert url.password == secret
    for shown in (url.redacted(), str(url), repr(url)):
        assert secret not in shown
        assert quote(secret, safe="") not in shown


# --- secrets ------------------------------------------------------------------------------


def test_smtp_password_in_the_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[alerts]\nsmtp_user = "forkq"\nsmtp_password = "Hunter2pw"\n')
    [line] = problems(path)
    assert ": alerts.smtp_password: " in line
    assert "FORKQ_SMTP_PASSWORD" in line
    assert "Hunter2pw" not in line


def test_smtp_password_comes_from_the_environment_and_is_not_in_repr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORKQ_SMTP_PASSWORD", "Hunter2pw")
    alerts = load_config(write(tmp_path, '[alerts]\nsmtp_user = "forkq"\n')).alerts
    assert alerts.smtp_password == "Hunter2pw"
    assert "Hunter2pw" not in repr(alerts)


# --- values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "key", "value", "seconds"),
    [
        ("alerts", "cooldown", '"15m"', 900.0),
        ("pools.default", "retention", '"7d"', 604800.0),
        ("pools.default", "timeout", '"90s"', 90.0),
        ("pools.default", "max_child_lifetime", '"1h"', 3600.0),
        ("supervisor", "poll_interval", '"500ms"', 0.5),
        ("supervisor", "shutdown_timeout", "45", 45.0),
        ("alerts.defaults", "max_age", '"5m"', 300.0),
    ],
)
def test_durations_are_parsed_to_seconds(
    tmp_path: Path, section: str, key: str, value: str, seconds: float
) -> None:
    config = load_config(write(tmp_path, f"[{section}]\n{key} = {value}\n"))
    holder: Any = {
        "alerts": config.alerts,
        "pools.default": config.pool("default"),
        "supervisor": config.supervisor,
        "alerts.defaults": config.alerts.defaults,
    }[section]
    assert getattr(holder, key) == seconds


@pytest.mark.parametrize("value", ['"soon"', '"-5m"', '"15 minutes"', "true", "-1", "[1]"])
def test_a_bad_duration_is_refused(tmp_path: Path, value: str) -> None:
    [line] = problems(write(tmp_path, f"[alerts]\ncooldown = {value}\n"))
    assert ": alerts.cooldown: " in line


def test_max_workers_below_workers_is_refused(tmp_path: Path) -> None:
    [line] = problems(write(tmp_path, "[pools.email]\nworkers = 4\nmax_workers = 2\n"))
    assert ": pools.email.max_workers: must be at least workers (4)" in line


def test_a_refused_workers_is_not_compared_as_the_default(tmp_path: Path) -> None:
    """workers = -1 is refused; max_workers is not then said to be below the default."""
    [line] = problems(write(tmp_path, "[pools.email]\nworkers = -1\nmax_workers = 1\n"))
    assert ": pools.email.workers: " in line


@pytest.mark.parametrize(
    ("value", "wanted"),
    [('"ops@example.com"', ("ops@example.com",)),
     ('["Ops <ops@example.com>", "dev@example.com"]', ("Ops <ops@example.com>", "dev@example.com")),
     ('"ops@example.com, dev@example.com"', ("ops@example.com, dev@example.com",))],
)  # fmt: skip
def test_email_to_takes_addresses(tmp_path: Path, value: str, wanted: tuple[str, ...]) -> None:
    assert load_config(write(tmp_path, f"[alerts]\nemail_to = {value}\n")).alerts.email_to == wanted


@pytest.mark.parametrize("value", ['"ops"', '["ops@example.com", "oncall"]', "[1]"])
def test_email_to_refuses_what_holds_no_address(tmp_path: Path, value: str) -> None:
    """A name without a domain would be refused by the mail server at the first alert."""
    [line] = problems(write(tmp_path, f"[alerts]\nemail_to = {value}\n"))
    assert ": alerts.email_to: expected " in line


def test_a_pool_without_max_workers_is_static(tmp_path: Path) -> None:
    pool = load_config(write(tmp_path, "[pools.email]\nworkers = 3\n")).pool("email")
    assert pool is not None and pool.max_workers == 3


@pytest.mark.parametrize("value", ["2.5", '"2"', "true", "-1"])
def test_workers_must_be_a_whole_number(tmp_path: Path, value: str) -> None:
    [line] = problems(write(tmp_path, f"[pools.email]\nworkers = {value}\n"))
    assert ": pools.email.workers: " in line


def test_on_success_must_be_a_known_mode(tmp_path: Path) -> None:
    [line] = problems(write(tmp_path, '[pools.email]\non_success = "forget"\n'))
    assert ": pools.email.on_success: expected one of delete, archive, keep" in line


def test_a_webhook_must_be_http(tmp_path: Path) -> None:
    [line] = problems(write(tmp_path, '[alerts]\nwebhook_url = "ftp://chat.example/x"\n'))
    assert ": alerts.webhook_url: " in line


def test_queue_rules_inherit_the_alert_defaults(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """
            [alerts.defaults]
            max_ready = 1000
            max_age = "5m"
            [alerts.rules.email]
            max_age = "15m"
            """,
        )
    )
    rule = config.alerts.rules["email"]
    assert (rule.max_ready, rule.max_age) == (1000, 900.0)


# --- schedules ----------------------------------------------------------------------------


def schedule(cron: str = "0 4 * * *", timezone: str = "Asia/Tokyo") -> str:
    return f"""
        [schedules.nightly]
        cron = "{cron}"
        timezone = "{timezone}"
        handler = "reports.nightly"
        queue = "reports"
        """


def test_a_valid_schedule_loads(tmp_path: Path) -> None:
    [nightly] = load_config(write(tmp_path, schedule())).schedules
    assert (nightly.name, nightly.cron, nightly.timezone) == ("nightly", "0 4 * * *", "Asia/Tokyo")


@pytest.mark.parametrize("cron", ["61 * * * *", "every night", "* * *", ""])
def test_a_bad_cron_expression_is_refused(tmp_path: Path, cron: str) -> None:
    [line] = problems(write(tmp_path, schedule(cron=cron)))
    assert ": schedules.nightly: cron: not a valid cron expression" in line


@pytest.mark.parametrize("cron", ["@hourly", "0 4 * * * 30"])
def test_a_cron_macro_or_a_seconds_field_loads(tmp_path: Path, cron: str) -> None:
    # croniter's sixth field is seconds (README: Schedules), as the cluster tests use it
    [loaded] = load_config(write(tmp_path, schedule(cron=cron))).schedules
    assert loaded.cron == cron


@pytest.mark.parametrize("timezone", ["Mars/Olympus_Mons", "", "../../etc/passwd", "Asia/Tokyo/"])
def test_an_unknown_time_zone_is_refused(tmp_path: Path, timezone: str) -> None:
    [line] = problems(write(tmp_path, schedule(timezone=timezone)))
    assert ": schedules.nightly: timezone: unknown time zone" in line


@pytest.mark.parametrize("timezone", ["America", "x" * 300])
def test_a_time_zone_that_is_not_a_zone_file_is_refused(tmp_path: Path, timezone: str) -> None:
    [line] = problems(write(tmp_path, schedule(timezone=timezone)))
    assert ": schedules.nightly: timezone: " in line


def test_a_schedule_without_cron_or_handler_is_refused(tmp_path: Path) -> None:
    lines = problems(write(tmp_path, '[schedules.nightly]\nqueue = "reports"\n'))
    assert {line.split(": ")[1] for line in lines} == {
        "schedules.nightly.cron",
        "schedules.nightly.handler",
    }


def test_a_schedule_payload_must_be_json(tmp_path: Path) -> None:
    text = schedule() + "payload = { at = 1979-05-27T07:32:00Z }\n"
    [line] = problems(write(tmp_path, text))
    assert ": schedules.nightly.payload: " in line


# --- junk never crashes the loader --------------------------------------------------------

toml_scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["15m", "7d", "0", "1e3", "keep", "delete", "-1s", "90 s"])
    | st.datetimes(timezones=st.just(UTC))
    | st.dates()
    | st.times()
)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def assert_loads_or_refuses(raw: dict[str, Any]) -> Config | None:
    """The only way a bad file may fail is a ConfigError (exit 78), never a traceback."""
    try:
        return build_config(raw, "junk.toml")
    except ConfigError as exc:
        assert str(exc).startswith("junk.toml: ")
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.text(min_size=1, max_size=80),
    body=st.dictionaries(
        st.sampled_from(POOL_KEYS) | st.text(max_size=12), toml_values, max_size=6
    ),
)
def test_junk_pool_values_are_a_config_error_never_a_crash(name: str, body: dict[str, Any]) -> None:
    config = assert_loads_or_refuses({"pools": {name: body}})
    if config is not None:
        [pool] = config.pools
        assert isinstance(pool.workers, int) and isinstance(pool.max_workers, int)
        assert 0 <= pool.workers <= pool.max_workers
        assert pool.on_success in ("delete", "archive", "keep")


@settings(max_examples=200, deadline=None)
@given(
    section=st.sampled_from(["supervisor", "alerts", "database", "pools", "schedules"]),
    body=toml_values,
)
def test_junk_anywhere_is_a_config_error_never_a_crash(section: str, body: Any) -> None:
    assert_loads_or_refuses({section: body})


@pytest.mark.parametrize("value", ["nan", "inf", '"1' + "0" * 400 + 's"'])
def test_a_duration_must_be_finite(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f"[pools.default]\ntimeout = {value}\n")
    try:
        config = load_config(path)
    except ConfigError:
        return
    timeout = config.pools[0].timeout
    assert math.isfinite(timeout), timeout


def test_datetime_values_in_pool_keys_are_refused(tmp_path: Path) -> None:
    when = datetime(2024, 1, 1, tzinfo=UTC).isoformat()
    [line] = problems(write(tmp_path, f"[pools.default]\ntimeout = {when}\n"))
    assert ": pools.default.timeout: " in line


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[pools.email]\nworkers = 100000\n", ": pools.email.workers: must be at most 1024"),
        (
            "[pools.email]\nworkers = 2\nmax_workers = 5000\n",
            ": pools.email.max_workers: must be at most 1024",
        ),
        ("[alerts]\nsmtp_port = 70000\n", ": alerts.smtp_port: must be at most 65535"),
        (
            '[alerts]\nwebhook_url = "https://bot:Hook-pw-77@chat.example.com/hooks/1"\n',
            ": alerts.webhook_url: a user or password before the host is not sent",
        ),
        ('[alerts]\nwebhook_url = "ftp://chat.example.com/x"\n', "expected an http:// or https://"),
    ],
    ids=["workers", "max-workers", "smtp-port", "webhook-userinfo", "webhook-scheme"],
)
def test_a_value_past_what_can_work_is_refused(tmp_path: Path, text: str, says: str) -> None:
    """A typo'd pool size would fork until the host runs out of processes; a port past
    65535 or a webhook whose credential urllib would drop could never send."""
    [line] = problems(write(tmp_path, text))
    assert says in line, line
    assert "Hook-pw-77" not in line
