"""The CLI's two consoles, ``out`` for answers (stdout) and ``err`` for errors and progress
(stderr), and the one rule every printer of the CLI follows: no control character of the
text it prints reaches the terminal raw.

What the CLI prints comes from a node, and much of it was written by other people (a
review's note, an instance key, a flow's input, an error's message): an ESC or a C1 control
in it would be a command to the reader's terminal (move the cursor, rewrite the screen, set
the window title, write the clipboard). rich's markup escaping does not touch them. So
:func:`printable` shows each control character but a tab and a line feed as its escape
(``\\x1b``), the consoles pass every segment of text they render through it (rich's own
styles and cursor moves are not text: they are kept), and :func:`json_text` writes JSON
whose strings carry them as ``\\u`` escapes (the same values, for scripts).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

__all__ = ["SafeConsole", "err", "json_text", "out", "printable"]

#: The control characters (C0, DEL, C1) but a tab and a line feed.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: What JSON with ``ensure_ascii=False`` leaves raw: DEL and the C1 controls (it escapes C0).
_JSON_RAW = re.compile("[\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with each control character but a tab and a line feed shown as its
    escape (``"\\x1b]0;x\\x07"`` prints as ``\\x1b]0;x\\x07``, visible and inert)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON for a terminal or a script: non-ASCII text as itself, every
    control character as a ``\\u`` escape (the same string to a JSON reader)."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _printable_text(text: Text) -> Text:
    """``text`` (its styles kept) with its control characters shown as :func:`printable`
    shows them, before rich lays it out (a table's column is then as wide as what shows)."""
    found = list(_CONTROL.finditer(text.plain))
    if not found:
        return text
    shown = text.blank_copy()
    last = 0
    for match in found:
        shown.append_text(text[last : match.start()])
        shown.append(printable(match.group()))
        last = match.end()
    shown.append_text(text[last:])
    return shown


class SafeConsole(Console):
    """A rich console that renders every text through :func:`printable`."""

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """rich's rendering, with the control characters of the text shown escaped: a
        text's before its layout, and then any segment's that still holds one (a segment
        that is rich's own control, a cursor move, passes as it is)."""
        if isinstance(renderable, str):
            renderable = printable(renderable)
        elif isinstance(renderable, Text):
            renderable = _printable_text(renderable)
        for segment in super().render(renderable, options):
            if segment.control is None and _CONTROL.search(segment.text):
                yield Segment(printable(segment.text), segment.style)
            else:
                yield segment


out = SafeConsole(highlight=False)
# soft_wrap: a line on stderr is never broken at the terminal's width (80 columns when
# piped), so an error stays one line and a cursor can be copied whole.
err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
