"""The CLI's two consoles: ``out`` for answers (stdout), ``err`` for errors and progress
(stderr)."""

from __future__ import annotations

from rich.console import Console

__all__ = ["err", "out"]

out = Console(highlight=False)
# soft_wrap: a line on stderr is never broken at the terminal's width (80 columns when
# piped), so an error stays one line and a cursor can be copied whole.
err = Console(stderr=True, highlight=False, soft_wrap=True)
