"""The PHP producer over two databases (`Forkq\\Router`, clients/php/src/Router.php) with
Debian's real php-cli: given a PDO per database and the TOML's `queues` lists, each job
lands in its queue's database (two SQLite files, or two MariaDB databases on one server),
inside that PDO's transaction; a bad map is refused before anything is written."""

from __future__ import annotations

from databases_util import reports_url_fixture  # noqa: F401  (the `reports_url` fixture)
from php_util import (
    Php,
    jobs,
    pdo_dsn,
    php_fixture,  # noqa: F401  (the `php` fixture)
    run_php_fixture,  # noqa: F401  (the `run_php` fixture)
)

ROUTER = r"""
require dirname(getenv('FORKQ_PHP_CLIENT')) . '/Router.php';

use Forkq\Router;

$user = getenv('REPORTS_USER');
$password = getenv('REPORTS_PASSWORD');
$reports = new PDO(getenv('REPORTS_DSN'), $user === '' ? null : $user, $password === '' ? null : $password);
$router = new Router(['default' => $pdo, 'reports' => $reports], ['reports' => ['reports', 'pdf']]);
"""


def test_each_job_lands_in_the_database_of_its_queue(
    run_php: Php, db_url: str, reports_url: str
) -> None:
    dsn, user, password = pdo_dsn(reports_url)
    env = {"REPORTS_DSN": dsn, "REPORTS_USER": user, "REPORTS_PASSWORD": password}
    out = run_php(
        ROUTER
        + """
        out($router->enqueue('mail.send', ['to' => 'a'], ['queue' => 'email']));
        out($router->enqueue('report.pdf', ['n' => 1], ['queue' => 'pdf']));
        out($router->enqueue('report.build', [], ['queue' => 'reports', 'unique_key' => 'r1']));
        out($router->enqueue('plain', []));
        $router->enqueue('report.build', [], ['queue' => 'reports', 'unique_key' => 'r1'], $again);
        out($again);
        $router->pdoFor('pdf')->beginTransaction();
        $router->enqueue('report.rolled.back', [], ['queue' => 'pdf']);
        $router->pdoFor('pdf')->rollBack();
        out([$router->databaseOf('pdf'), $router->databaseOf('email'), $router->ref('pdf', 7), $router->ref('email', 7)]);
        out(attempt(fn() => new Router(['reports' => $reports], ['reports' => ['x']])));
        out(attempt(fn() => new Router(['default' => $pdo], ['reports' => ['x']])));
        out(attempt(fn() => new Router(['default' => $pdo, 'reports' => $reports, 'b' => $pdo], ['reports' => ['x'], 'b' => ['x']])));
        out(attempt(fn() => new Router(['default' => $pdo, 'reports' => $reports], ['reports' => ['a'], 'default' => ['a']])));
        """,
        env=env,
    )
    mail, pdf, build, plain, again, names, *refused = out
    home, reports = jobs(db_url), jobs(reports_url)
    assert {j["handler"]: j["queue"] for j in home.values()} == {
        "mail.send": "email",
        "plain": "default",
    }
    assert {j["handler"]: j["queue"] for j in reports.values()} == {
        "report.pdf": "pdf",
        "report.build": "reports",
    }
    assert home[mail]["handler"] == "mail.send" and home[plain]["handler"] == "plain"
    assert reports[pdf]["handler"] == "report.pdf" and reports[build]["unique_key"] == "r1"
    assert again is True  # the unique key was looked up in reports, where it is
    assert names == ["reports", "default", "reports:7", "7"]
    assert [r.get("error") for r in refused] == ["InvalidArgumentException"] * 4
    assert "home database 'default'" in refused[0]["message"]
    assert "no such database" in refused[1]["message"]
    assert "queue 'x' is in both 'reports' and 'b'" in refused[2]["message"]
    # The home database was given: the message says why listing its queues is refused
    assert "the home database takes every queue not listed" in refused[3]["message"]
