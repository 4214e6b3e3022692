"""The code of ``docs/writing-flows.md``, by the markers the page puts before its blocks.

Each fenced block of the page follows one marker line, an HTML comment the rendered page does
not show::

    <!-- guide: file flows/ci_build.py -->     a file the reader writes (path from the folder)
    <!-- guide: shell pass -->                 commands the reader runs, in that folder
    <!-- guide: example serve-your-ci -->      shown, not run (it needs the reader's own CI)

:func:`guide_blocks` reads them all and refuses a page with a fenced block that has no marker,
so no code on the page escapes its test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GUIDE", "Block", "guide_blocks", "write_files"]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing-flows.md"
_MARKED = re.compile(
    r"<!-- guide: (?P<kind>file|shell|example) (?P<name>\S+) -->\n"
    r"```(?P<lang>\w*)\n(?P<code>.*?)^```",
    flags=re.S | re.M,
)
_FENCE = re.compile(r"^```\w*\n.*?^```", flags=re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One marked block: its kind (file, shell, example), name and code."""

    kind: str
    name: str
    lang: str
    code: str


def guide_blocks(page: Path = GUIDE) -> dict[str, Block]:
    """The page's marked blocks by name (a file's name is its path).

    Raises:
        AssertionError: a fenced block with no marker, or two blocks with one name.
    """
    text = page.read_text(encoding="utf-8")
    blocks = [Block(**m.groupdict()) for m in _MARKED.finditer(text)]
    fences = _FENCE.findall(text)
    assert len(blocks) == len(fences), (
        f"{page.name}: {len(fences) - len(blocks)} fenced block(s) without a guide marker"
    )
    named = {b.name: b for b in blocks}
    assert len(named) == len(blocks), f"{page.name}: two blocks with one name"
    return named


def write_files(folder: Path, blocks: dict[str, Block]) -> list[Path]:
    """Write every ``file`` block under ``folder`` (its folders made); returns the paths."""
    written = []
    for block in blocks.values():
        if block.kind == "file":
            path = folder / block.name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.code, encoding="utf-8")
            written.append(path)
    return written
