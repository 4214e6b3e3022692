"""Packaging hook: the Alembic migrations ship inside the distribution.

The repository keeps them in ``alembic/`` at its root (``alembic.ini`` points there); a built
wheel carries a copy as ``flowpark/store/migrations/`` so an installed ``flowpark db upgrade``
finds them without the source tree. Everything else is in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithMigrations(build_py):
    """``build_py`` that also copies ``alembic/`` to ``flowpark/store/migrations/``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads alembic/ in the tree
            return
        target = Path(self.build_lib) / "flowpark" / "store" / "migrations"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(
            ROOT / "alembic", target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )


setup(cmdclass={"build_py": BuildWithMigrations})
