"""The side's package, whichever layout its tree has: the harness imports flowpark through here.

``python -m bench compare --against REV`` runs this harness on two trees: this one, where the
code is the ``flowpark`` package (``flowpark.engine.node.engine``, ``flowpark.samples`` ...),
and a revision from before the one-package move, where it was ``app`` and ``samples``
(``app.engine.engine``, ``app.store.SqlJournal``). :func:`module` takes the new name and
answers the side's module: the new one when the side's tree has the ``flowpark`` package,
else the old name (:func:`old_name`). The layout is decided by the tree ``app`` is imported
from (the side's tree is first on ``PYTHONPATH``), not by trying the new name first: the
venv's own flowpark install would answer it on the old side too.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["NEW_LAYOUT", "TREE", "module", "name_of", "old_name", "store_class", "store_of"]

#: (prefix of a new module name, its name before the move); the first match is taken.
_MOVED = (
    ("flowpark.samples", "samples"),
    ("flowpark.engine.node.engine", "app.engine.engine"),
    ("flowpark.engine.records", "app.engine.journal"),
    ("flowpark.engine.node.", "app.engine."),
    ("flowpark.engine.execute.", "app.engine."),
    ("flowpark.engine.decide.", "app.engine."),
    ("flowpark.store.sql_store", "app.store.sql_journal"),
    ("flowpark.cli.main", "app.cli"),
    ("flowpark.cli.demo", "app.demo"),
    ("flowpark.cli.", "app.cli_ops."),
    ("flowpark.", "app."),
)
#: Classes renamed with the move (new name: old name).
_RENAMED = {"SqlStore": "SqlJournal"}


def _tree() -> Path | None:
    """The tree the side's code comes from: where ``app`` is imported from (None when no
    ``app`` is importable: an installed flowpark, the new layout)."""
    spec = importlib.util.find_spec("app")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent.parent


#: The side's tree (None: an installed flowpark).
TREE = _tree()
#: True when the side's code is the ``flowpark`` package (this tree, or an installed one).
NEW_LAYOUT = TREE is None or (TREE / "flowpark" / "engine").is_dir()


def old_name(name: str) -> str:
    """The module ``name`` (a ``flowpark`` module) was before the move."""
    for new, old in _MOVED:
        if name == new or name.startswith(new if new.endswith(".") else new + "."):
            return old + name[len(new) :]
    return name


def module(name: str) -> ModuleType:
    """The side's module of the new ``name`` (``flowpark.store.db``; on an old tree
    ``app.store.db``)."""
    return importlib.import_module(name if NEW_LAYOUT else old_name(name))


def name_of(module_name: str, name: str) -> Any:
    """The attribute ``name`` of the side's ``module_name``, under its old name where it was
    renamed (``SqlStore`` was ``SqlJournal``)."""
    found = module(module_name)
    if hasattr(found, name) or NEW_LAYOUT:
        return getattr(found, name)
    return getattr(found, _RENAMED.get(name, name))


def store_class() -> Any:
    """The side's composed SQL store class (``SqlStore``; ``SqlJournal`` before the move)."""
    return name_of("flowpark.store", "SqlStore")


def store_of(engine: Any) -> Any:
    """An engine's store (``Engine.store``; ``Engine.journal`` before the move)."""
    return engine.store if NEW_LAYOUT else engine.journal
