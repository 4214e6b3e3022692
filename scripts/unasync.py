#!/usr/bin/env python3
"""Write the blocking client (flowpark/client/_sync.py) from the async one
(flowpark/client/_async.py), the way httpcore keeps its two clients: one source, a token
rewrite, a check that the written file is current.

    python scripts/unasync.py            # rewrite _sync.py
    python scripts/unasync.py --check    # exit 1 when _sync.py is not what _async.py makes

The rewrite, line by line:
* the tokens of TOKENS (``async def`` -> ``def``, ``await x`` -> ``x``, ``AsyncClient`` ->
  ``Client``, ``anyio.sleep`` -> ``time.sleep`` ...) and the docstring sentences of PHRASES;
* a block between ``# unasync: async only`` and ``# unasync: sync only`` is dropped, and the
  commented lines between ``# unasync: sync only`` and ``# unasync: end`` are uncommented
  (what the two clients do differently: a blocking read cannot be cancelled at a deadline);
then ruff sorts the imports and formats the result, so the file passes scripts/check.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path("flowpark/client/_async.py")
TARGET = Path("flowpark/client/_sync.py")
HEADER = (
    "# Written by scripts/unasync.py from _async.py: edit that file, then run the script\n"
    "# (scripts/check fails when this file is not what it writes).\n"
)

#: (pattern, replacement), applied in order to each line outside the blocks.
TOKENS: list[tuple[str, str]] = [
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncClient\b", "Client"),
    (r"\baclose\b", "close"),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"\baiter_lines\b", "iter_lines"),
    (r"\banyio\.sleep\b", "time.sleep"),
]

#: Whole sentences of the async client's docstrings and the blocking client's.
PHRASES: list[tuple[str, str]] = [
    (
        '"""The asyncio (or trio) client: :class:`AsyncClient`, the same calls as\n'
        ':class:`~flowpark.client.Client`, awaited."""',
        '"""The blocking client: :class:`Client`."""',
    ),
    (
        '    """An async client of a flowpark node\'s HTTP API (the methods of\n'
        "    :class:`~flowpark.client.Client`, awaited; ``list`` and ``events`` are async\n"
        "    iterators).\n",
        '    """A blocking client of a flowpark node\'s HTTP API.\n',
    ),
    (
        "        message, and its ``end`` event, wakes the wait at once); otherwise the instance\n"
        "        is read with a backoff from 50 ms up to 2 s.\n",
        "        message, and its ``end`` event, wakes the wait at once); otherwise, and for the\n"
        "        last 20 s of ``timeout``, the instance is read with a backoff from 50 ms up"
        " to 2 s.\n",
    ),
]

ASYNC_ONLY, SYNC_ONLY, END = "# unasync: async only", "# unasync: sync only", "# unasync: end"


def _lines(text: str) -> list[str]:
    """The blocks resolved for the blocking client, tokens rewritten."""
    out: list[str] = []
    mode = None
    for line in text.splitlines(keepends=True):
        marker = line.strip()
        if marker in (ASYNC_ONLY, SYNC_ONLY, END):
            mode = None if marker == END else marker
            continue
        if mode == ASYNC_ONLY:
            continue
        if mode == SYNC_ONLY:
            indent = line[: len(line) - len(line.lstrip())]
            body = line.lstrip()
            if not body.startswith("#"):
                raise SystemExit(f"unasync: a sync-only line is not a comment: {line!r}")
            out.append(indent + body[2:] if body.startswith("# ") else indent + body[1:])
            continue
        if line.strip() == "import anyio":
            continue
        for pattern, replacement in TOKENS:
            line = re.sub(pattern, replacement, line)
        out.append(line)
    if mode is not None:
        raise SystemExit(f"unasync: a block is not closed with {END!r}")
    return out


def _ruff(args: list[str], text: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1) or not done.stdout:
        raise SystemExit(f"unasync: ruff {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def unasync(source: str) -> str:
    """The blocking client's module, written from the async client's ``source``."""
    for async_text, sync_text in PHRASES:
        if async_text not in source:
            raise SystemExit(f"unasync: the async client no longer says {async_text[:60]!r}...")
        source = source.replace(async_text, sync_text)
    text = "".join(_lines(source))
    # sorted imports (AsyncIterator became Iterator), ``yield from`` for a loop of yields
    fixes = ["--fix", "--unsafe-fixes", "--exit-zero", "--quiet", "--select", "I,UP028,F401"]
    text = _ruff(["check", *fixes], text)
    return HEADER + _ruff(["format", "--quiet"], text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when the file is stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this)")
    options = parser.parse_args()
    written = unasync((options.root / SOURCE).read_text())
    target = options.root / TARGET
    if not options.check:
        target.write_text(written)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        fresh = Path(folder) / TARGET.name
        fresh.write_text(written)
        if fresh.read_text() == target.read_text():
            return 0
    print(
        f"{TARGET} is not what scripts/unasync.py writes from {SOURCE}: "
        "run python scripts/unasync.py (and edit only the async client)",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
