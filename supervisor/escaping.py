"""What text from rows may look like where people read it: a terminal, a chat, a mail.

Rows are written by anyone who can INSERT into forkq_jobs (any app, any language),
and the names and errors in them reach operators: `forkq status`, `jobs`, `show`,
the console log, process titles, alert messages. None of those may let a row drive
the reader's terminal (ESC sequences, CR overwriting a line, BEL), forge lines of a
table or an alert (a newline in a queue name), page a whole chat channel or dress
up a link. JSON output needs none of this: JSON escapes control characters itself
and is kept exact.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (some terminals take U+009B as CSI), the line and
# paragraph separators, and the bidirectional marks and overrides that reorder what a
# reader sees ("Trojan source").
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# A chat mention: `@channel`, `@here`, `@everyone`, `@all`, `@someone` (Slack with
# link_names, Mattermost, Rocket.Chat, Discord). A zero-width space after the `@` keeps
# the text as it reads and stops the notification.
_MENTION = re.compile(r"@(?=\w)")
# A Markdown link `[text](url)` (Mattermost, Discord): broken the same way.
_MARKDOWN_LINK = re.compile(r"\]\(")
ZERO_WIDTH_SPACE = "\u200b"


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def for_terminal(text: str) -> str:
    """`text` on one line, every control character shown as an escape (`\\x1b`, `\\n`).

    Backslashes are left alone: the point is that nothing acts on the terminal and no
    line breaks, not that the escape can be reversed (`--json` output is exact).
    """
    return _CONTROL.sub(_visible, text)


def for_page(text: str) -> str:
    """Text for a dashboard page (HTML-escaped after this): line breaks kept (a traceback
    in its <pre>), every other control character and bidirectional mark shown as an
    escape, as the terminal shows it: a name cannot read backwards or hide its end."""
    return _CONTROL.sub(_visible_but_newline, text.replace("\r\n", "\n"))


def _visible_but_newline(match: re.Match[str]) -> str:
    return "\n" if match.group() == "\n" else _visible(match)


def lines_for_terminal(text: str) -> list[str]:
    """Multi-line text (a traceback) as lines, each escaped: only a newline breaks a line."""
    return [for_terminal(line.removesuffix("\r")) for line in text.split("\n")]


def for_chat(text: str) -> str:
    """Message text for a Slack-compatible webhook.

    Slack's rules: `&`, `<` and `>` as `&amp;`, `&lt;`, `&gt;`, so `<!channel>`,
    `<@U123>` and `<http://x|label>` are shown, never acted on. Mentions written plainly
    (`@here`) and Markdown links get a zero-width space; control characters are escapes,
    so a name cannot start a new line of the message.
    """
    text = for_terminal(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MENTION.sub("@" + ZERO_WIDTH_SPACE, text)
    return _MARKDOWN_LINK.sub("]" + ZERO_WIDTH_SPACE + "(", text)


def for_header(text: str, limit: int = 200) -> str:
    """A mail header value (a subject): one line, control characters as escapes, cut."""
    line = " ".join(for_terminal(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
