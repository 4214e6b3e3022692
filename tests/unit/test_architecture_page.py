"""docs/architecture.md names files and functions at each step of a start and a wake: each
``path.py:name`` (``Class.method`` too) it names must exist, so the page cannot drift from
the code unnoticed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
#: ``flowpark/engine/node/claimed.py:run_claim``, ``flowpark/store/runs.py:SqlRuns.commit``
REFERENCE = re.compile(r"`((?:app|flowpark)/[\w/]+\.py):([A-Za-z_][\w.]*)`")


def references(text: str) -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in REFERENCE.finditer(text)]


def defined(path: Path) -> set[str]:
    """The dotted names ``path`` defines: functions, classes and their methods, and the
    functions nested in a function (a route handler's factory and its handler)."""
    names: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(prefix + node.name)
                walk(node.body, f"{prefix}{node.name}.")

    walk(ast.parse(path.read_text(), str(path)).body, "")
    return names


def missing(refs: list[tuple[str, str]], root: Path = ROOT) -> list[str]:
    gone = []
    for path, name in refs:
        file = root / path
        if not file.is_file() or name not in defined(file):
            gone.append(f"{path}:{name}")
    return gone


def test_every_function_the_page_names_exists() -> None:
    refs = references(PAGE.read_text())
    assert len(refs) > 25  # the page's steps are read
    assert ("flowpark/engine/node/claimed.py", "run_claim") in refs
    assert missing(refs) == []


def test_a_renamed_function_or_moved_file_is_found() -> None:
    text = (
        "`flowpark/engine/node/claimed.py:run_claim` then "
        "`flowpark/engine/node/claimed.py:advance_claim`, "
        "`flowpark/store/runs.py:SqlRuns.commit`, `flowpark/store/runs.py:SqlRuns.gone`, "
        "`flowpark/engine/walker.py:walk`"
    )
    assert missing(references(text)) == [
        "flowpark/engine/node/claimed.py:advance_claim",
        "flowpark/store/runs.py:SqlRuns.gone",
        "flowpark/engine/walker.py:walk",
    ]
