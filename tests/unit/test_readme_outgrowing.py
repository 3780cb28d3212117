"""The README's "Outgrowing one database": every TOML deployment example in it is a
config the reader accepts, and the several-databases ones route as the text says."""

from __future__ import annotations

import re
import tomllib

import pytest
from util import REPO_ROOT

from supervisor.config import HOME_DATABASE, build_config

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
START = README.index("## Outgrowing one database\n")
SECTION = README[START : README.index("\n## ", START + 1)]
EXAMPLES = re.findall(r"```toml\n(.*?)```", SECTION, flags=re.S)


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORKQ_DATABASE_URL", "FORKQ_DATABASE_URL_REPORTS", "FORKQ_CONFIG"):
        monkeypatch.delenv(name, raising=False)


def test_the_section_has_an_example_for_each_step() -> None:
    assert len(EXAMPLES) >= 3  # scale up, Galera, several databases (a Galera home)
    for step in ("### Scale up first", "### Galera", "### Several databases: for capacity"):
        assert step in SECTION, step


@pytest.mark.parametrize("text", EXAMPLES, ids=[f"example{n}" for n in range(len(EXAMPLES))])
def test_every_example_is_a_valid_config(text: str) -> None:
    config = build_config(tomllib.loads(text), "README.md")
    for pool in config.pools:  # every pool's queue is in some database
        assert config.url_for_queue(pool.name) is not None


def test_the_several_databases_examples_route_by_queue() -> None:
    several = [build_config(tomllib.loads(t), "README.md") for t in EXAMPLES if "[databases." in t]
    assert several
    for config in several:
        assert config.database_of("reports") == config.database_of("pdf") == "reports"
        assert config.database_of("default") == HOME_DATABASE
    assert any(len(c.database.nodes) == 3 for c in several)  # home: a Galera cluster
