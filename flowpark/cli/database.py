"""``flowpark db``: the database schema commands, behind the typer commands of
:mod:`flowpark.cli.main`."""

from __future__ import annotations

from typing import Any

import typer

__all__ = ["schema_name", "upgrade_database"]


def schema_name(value: str | None) -> str | None:
    """The ``--schema`` option's check: a plain SQL identifier.

    Raises:
        typer.BadParameter: it is not (exit 2, the option named).
    """
    if value is None:
        return None
    from flowpark.store.db import check_schema_name

    try:
        return check_schema_name(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def upgrade_database(url: str | None, schema: str | None) -> str:
    """Migrate the database to head (``flowpark db upgrade``).

    Args:
        url: ``--url``; None: ``FLOWPARK_DATABASE_URL`` (or its default).
        schema: ``--schema``; None: ``FLOWPARK_DATABASE_SCHEMA`` (or none).

    Returns:
        The line to print: the database (its password masked) and its schema.

    Raises:
        typer.BadParameter: ``--schema`` given for a SQLite database.
        pydantic.ValidationError: a ``FLOWPARK_*`` setting does not validate.
        StoreUnavailable: not a database URL, or the database cannot be reached.
    """
    from pydantic import ValidationError
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from flowpark.errors import StoreUnavailable
    from flowpark.redaction import redact_url, register_secrets
    from flowpark.settings import Settings
    from flowpark.store.db import parse_url, sqlite_folder_missing, sync_url
    from flowpark.store.migrate import upgrade

    given: dict[str, Any] = {"database_url": url, "database_schema": schema}
    try:
        settings = Settings(**{name: value for name, value in given.items() if value})
    except ValidationError as exc:
        refused = [e for e in exc.errors() if e["loc"] == ("database_schema",)]
        if schema is None or not refused:
            raise
        raise typer.BadParameter(refused[0]["msg"], param_hint="--schema") from None
    target = settings.database_url
    register_secrets(settings.secret_values())
    try:
        sync_url(target)
        folder = sqlite_folder_missing(target)
    except (ValueError, ArgumentError) as exc:  # not a database URL: one line
        raise StoreUnavailable(f"invalid database URL: {exc}") from None
    if folder is not None:  # SQLite would say only "unable to open database file"
        raise StoreUnavailable(
            f"cannot create the SQLite database at {redact_url(target)}: directory "
            f"{folder} does not exist (create it first, or name another path)"
        )
    try:
        upgrade(target, schema=settings.database_schema)
    except DBAPIError as exc:  # unreachable: one line, no traceback
        shown = parse_url(target).render_as_string(hide_password=True)
        raise StoreUnavailable(f"cannot migrate the database at {shown}: {exc.orig}") from None
    where = f" (schema {settings.database_schema})" if settings.database_schema else ""
    return f"database at head: {redact_url(target)}{where}"
