"""PHP's `Forkq\\Router` with real daemons, one per database (each a forkq config of that
database alone), on both backends: jobs enqueued from php-cli into two databases are
each run by the daemon of their queue's database."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from daemon_util import (
    Daemon,
    daemons_fixture,  # noqa: F401  (the `daemons` fixture)
)
from databases_util import reports_url_fixture  # noqa: F401  (the `reports_url` fixture)
from php_util import (
    Php,
    pdo_dsn,
    php_fixture,  # noqa: F401  (the `php` fixture)
    php_string,
    run_php_fixture,  # noqa: F401  (the `run_php` fixture)
)
from util import wait_until


def runs(path: Path) -> dict[int, int]:
    """job id: pid of each run a record file holds (`id,pid,start,end` lines)."""
    if not path.exists():
        return {}
    lines = [line.split(",") for line in path.read_text().splitlines() if line.count(",") == 3]
    return {int(fields[0]): int(fields[1]) for fields in lines}


def test_php_jobs_in_two_databases_are_run_by_each_databases_daemon(
    daemons: Callable[..., Daemon], run_php: Php, reports_url: str, tmp_path: Path
) -> None:
    home = daemons(name="home", pools={"work": {"workers": 1}}).start().wait_ready()
    reports = daemons(name="rep", db_url=reports_url, pools={"reports": {"workers": 1}})
    reports.start().wait_ready()
    home_file, reports_file = tmp_path / "home.txt", tmp_path / "reports.txt"
    dsn, user, password = pdo_dsn(reports_url)
    [home_id, report_id] = run_php(
        f"""require dirname(getenv('FORKQ_PHP_CLIENT')) . '/Router.php';
        $reports = new PDO({php_string(dsn)}, {php_string(user)} ?: null, {php_string(password)} ?: null);
        $router = new Forkq\\Router(['default' => $pdo, 'reports' => $reports], ['reports' => ['reports']]);
        out($router->enqueue('t.record', ['file' => {php_string(str(home_file))}], ['queue' => 'work']));
        out($router->enqueue('t.record', ['file' => {php_string(str(reports_file))}], ['queue' => 'reports']));"""
    )
    wait_until(lambda: home_id in runs(home_file), timeout=30, message="the home job ran")
    wait_until(lambda: report_id in runs(reports_file), timeout=30, message="the reports job ran")
    assert runs(home_file)[home_id] in home.pool_children("work")
    assert runs(reports_file)[report_id] in reports.pool_children("reports")
