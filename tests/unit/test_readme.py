"""The README against the repository (issue 21.8): its Contents lists every section, its
links lead somewhere in the repository, it names no file the repository lacks (SPEC.md
is not shipped), and what it says schema.sql records is what schema.sql records."""

from __future__ import annotations

import re
import tomllib

from util import REPO_ROOT

from supervisor.store import SCHEMA_VERSION

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(level: str) -> list[str]:
    return re.findall(rf"^{level} (.+)$", README, flags=re.M)


def test_contents_lists_every_section_and_every_anchor_exists() -> None:
    contents = README[README.index("## Contents") : README.index("## In five minutes")]
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    sections = [slug(h) for h in headings("##") if h != "Contents"]
    assert [s for s in sections if s not in listed] == []
    anchors = {slug(h) for h in headings("#{2,4}")}
    assert [a for a in re.findall(r"\]\(#([^)]+)\)", README) if a not in anchors] == []


def test_relative_links_and_named_files_exist() -> None:
    for target in re.findall(r"\]\((?!#|https?://)([^)\s`]+)\)", README):
        assert (REPO_ROOT / target).exists(), target
    assert "SPEC.md" not in README
    for php in ("clients/php/src/Queue.php", "handlers/php/send_report.php"):
        assert "SPEC.md" not in (REPO_ROOT / php).read_text(encoding="utf-8"), php


def test_schema_sql_records_the_version_the_readme_says() -> None:
    schema = (REPO_ROOT / "schema.sql").read_text(encoding="utf-8")
    assert f"VALUES (1, {SCHEMA_VERSION});" in schema
    assert f"records version {SCHEMA_VERSION} (the latest)" in README
    assert f"Version {SCHEMA_VERSION} (this release)" in README
    for version in range(2, SCHEMA_VERSION + 1):
        assert f"Version {version} " in README, version


def test_the_five_minute_example_meets_itself() -> None:
    """Followed as written, the producer, the daemon and `forkq status` use one database
    and the job lands in the queue the config's pool works (issue: newcomer's first hour)."""
    section = README[README.index("## In five minutes") : README.index("### Installing")]
    [toml_text] = re.findall(r"```toml\n(.*?)```", section, flags=re.S)
    config = tomllib.loads(toml_text)
    [python_producer] = [b for b in re.findall(r"```python\n(.*?)```", section, flags=re.S)
                         if "Queue(" in b]  # fmt: skip
    [producer_url] = re.findall(r'Queue\("([^"]+)"\)', python_producer)
    assert config.get("database", {}).get("url") == producer_url
    [queue] = re.findall(r'queue="([^"]+)"', python_producer)
    assert queue in config["pools"]
    commands = re.findall(r"^(forkq \w+.*?)\s+#", section, flags=re.M)
    assert commands and all(" -c " in c for c in commands), commands
