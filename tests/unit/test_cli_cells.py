"""What the CLI's tables and `forkq show` print of a value: one line, escaped, and cut past
CELL_MOST characters (a 15 MB payload filled the operator's terminal); `--json` prints it
whole."""

from __future__ import annotations

from supervisor.cli.tables import CELL_MOST, cell


def test_a_long_value_is_cut_and_says_how_long_it_is() -> None:
    text = '{"a": "' + "x" * (CELL_MOST * 3) + '"}'
    shown = cell(text)
    assert shown.startswith('{"a": "xxx') and len(shown) < CELL_MOST + 100
    assert shown.endswith(f"… ({len(text):,} characters in all: --json prints it whole)")
    assert cell("x" * CELL_MOST) == "x" * CELL_MOST  # at the bound: whole


def test_control_characters_are_escaped_before_and_after_the_cut() -> None:
    assert cell("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert "\x1b" not in cell("\x1b" * (CELL_MOST + 5))
