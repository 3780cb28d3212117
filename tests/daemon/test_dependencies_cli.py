"""`forkq enqueue --depends-on` and `forkq show`'s parents and dependents (SPEC "Composing
jobs"), as an operator types them."""

from __future__ import annotations

import json
from pathlib import Path

from cli_util import failed, forkq, ok, workdir_fixture  # noqa: F401  (the `workdir` fixture)

from supervisor import Queue


def test_enqueue_depends_on_waits_and_show_names_parents_and_dependents(
    workdir: Path, db_url: str, queue: Queue
) -> None:
    first = queue.enqueue("mail.send")
    second = queue.enqueue("mail.send")
    child = int(
        ok(
            forkq(
                workdir, "enqueue", "mail.send", "--depends-on", str(first),
                "--depends-on", str(second), "--on-parent-failure", "continue",
                database=db_url,
            )
        )
    )  # fmt: skip
    document = json.loads(ok(forkq(workdir, "show", str(child), "--json", database=db_url)))
    assert document["status"] == "waiting"
    assert document["parents"] == [first, second]
    text = ok(forkq(workdir, "show", str(first), database=db_url))
    assert [line.split(None, 1) for line in text.splitlines() if line.startswith("dependents")] == [
        ["dependents", f"[{child}]"]
    ]
    listed = ok(forkq(workdir, "jobs", "--status", "waiting", database=db_url))
    assert [line.split()[0] for line in listed.splitlines()[1:]] == [str(child)]
    assert "dependents" not in document  # none wait on the child: nothing shown
    message = failed(
        forkq(workdir, "enqueue", "mail.send", "--depends-on", "99999999", database=db_url), 2
    )
    assert "no job 99999999" in message


def test_a_parent_failure_rule_without_depends_on_is_refused(workdir: Path, db_url: str) -> None:
    result = forkq(
        workdir, "enqueue", "mail.send", "--on-parent-failure", "continue", database=db_url
    )
    assert failed(result, 2) == "forkq: error: --on-parent-failure goes with --depends-on"
