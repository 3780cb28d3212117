"""forkq installed from its wheel, on a producer's machine: no config file, and no demo
`handlers` package (it stays in the repository). The built-in default config names that
module; `forkq enqueue` and the dashboard, which load handlers only to route a job by its
handler's queue, must work without it, as `Queue.enqueue` does.

The checkout's venv puts the repository on `sys.path` (forkq-checkout.pth) so the demo
imports; each subprocess here takes it off first, which leaves what a wheel install has.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from util import REPO_ROOT, free_tcp_port, subprocess_env, wait_until

from supervisor.store import open_store

AS_INSTALLED = (
    "import sys; sys.path[:] = [p for p in sys.path if p not in ('', {root!r})];"
    " from supervisor.cli.parser import main; sys.exit(main(sys.argv[1:]))"
)


def installed_env(db_url: str) -> dict[str, str]:
    environ = subprocess_env(db_url)
    for key in ("FORKQ_CONFIG", "PYTHONPATH"):
        environ.pop(key, None)
    return environ


def installed_forkq(
    cwd: Path, db_url: str, *args: str, wait: bool = True
) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    argv = [sys.executable, "-c", AS_INSTALLED.format(root=str(REPO_ROOT)), *args]
    argv += ["--database", db_url]
    if not wait:
        return subprocess.Popen(argv, cwd=cwd, env=installed_env(db_url), text=True)
    return subprocess.run(
        argv, cwd=cwd, env=installed_env(db_url), capture_output=True, text=True, timeout=60
    )


def test_the_demo_package_is_out_of_reach_as_installed(tmp_path: Path, db_url: str) -> None:
    """The premise: without the checkout on the path, `handlers` does not import (so the
    default config's module is missing, as on an app server)."""
    probe = installed_forkq(tmp_path, db_url, "run")
    assert isinstance(probe, subprocess.CompletedProcess)
    assert probe.returncode == 78, probe.stderr
    assert "module 'handlers' failed to import" in probe.stderr


def test_enqueue_without_a_config_needs_no_handler_module(tmp_path: Path, db_url: str) -> None:
    for extra, queue in [((), "default"), (("--queue", "mail"), "mail")]:
        done = installed_forkq(tmp_path, db_url, "enqueue", "mail.send", '{"to": 1}', *extra)
        assert isinstance(done, subprocess.CompletedProcess)
        assert done.returncode == 0, done.stderr
        job_id = int(done.stdout.strip())
        store = open_store(db_url)
        try:
            job = store.get_job(job_id)
        finally:
            store.close()
        assert job is not None and (job.queue, job.handler) == (queue, "mail.send")


def test_a_config_file_still_refuses_a_module_that_does_not_import(
    tmp_path: Path, db_url: str
) -> None:
    (tmp_path / "forkq.toml").write_text('[supervisor]\nhandlers = ["myapp.jobs"]\n')
    done = installed_forkq(tmp_path, db_url, "enqueue", "mail.send", "-c", "forkq.toml")
    assert isinstance(done, subprocess.CompletedProcess)
    assert done.returncode == 78, done.stderr
    assert "module 'myapp.jobs' failed to import" in done.stderr
    store = open_store(db_url)
    try:
        assert store.count_ready("default") == 0
    finally:
        store.close()


def test_the_dashboard_without_a_config_needs_no_handler_module(
    tmp_path: Path, db_url: str
) -> None:
    port = free_tcp_port()
    web = installed_forkq(tmp_path, db_url, "web", "--listen", f"127.0.0.1:{port}", wait=False)
    assert isinstance(web, subprocess.Popen)
    try:

        def answers() -> bool:
            assert web.poll() is None, f"forkq web exited {web.returncode}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    return bool(page.status == 200)
            except OSError:
                return False

        wait_until(answers, timeout=30, message="the dashboard answered")
    finally:
        web.terminate()
        web.wait(timeout=30)
