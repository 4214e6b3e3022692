"""The ``flowpark`` command: serve, worker, fakes, db upgrade, flows check, demo.

``serve`` and ``worker`` check the database before they start: a database they cannot use
(unreachable, or not migrated to head) is one line ``error: <code>: <message>`` on stderr
and exit code :data:`EXIT_STORE`, never a traceback.
"""

from __future__ import annotations

import math
import os
import re
from contextlib import ExitStack
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from flowpark.cli.parsing import one_line as _one_line

__all__ = [
    "EXIT_FLOWS_INVALID",
    "EXIT_FLOWS_UNLOADABLE",
    "EXIT_SETTINGS",
    "EXIT_STORE",
    "app",
    "main",
]

#: Exit code of every command when a ``FLOWPARK_*`` setting does not validate.
EXIT_SETTINGS = 2
#: Exit code of ``serve``, ``worker`` and ``db upgrade`` when the database cannot be used.
EXIT_STORE = 3
#: Exit code of ``serve`` and ``worker`` when a flow breaks a definition rule.
EXIT_FLOWS_INVALID = 4
#: Exit code of ``serve`` and ``worker`` when a flows target cannot be loaded.
EXIT_FLOWS_UNLOADABLE = 5

FLOWS_HELP = (
    "Flows to serve: a module path (mycompany.flows), a .py file or a folder of .py files "
    "(its folder goes on sys.path). Repeatable. Default: FLOWPARK_FLOWS, else the samples."
)


class LogLevel(StrEnum):
    """The levels ``--log-level`` takes (the root logger's and uvicorn's)."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    DEBUG = "debug"


#: Options of several commands (each command gives its own default).
HostOpt = Annotated[str, typer.Option("--host", metavar="HOST")]
LogLevelOpt = Annotated[
    LogLevel,
    typer.Option(
        "--log-level",
        case_sensitive=False,
        metavar="LEVEL",
        help="critical, error, warning, info or debug.",
    ),
]
FlowsOpt = Annotated[list[str] | None, typer.Option("--flows", metavar="TARGET", help=FLOWS_HELP)]

#: Help texts are Markdown: a docstring's paragraphs are wrapped to the terminal's width
#: (its line breaks are not kept; a blank line starts a paragraph, ``- `` a list item).
#: Every command of the tree, the operator commands too, renders in this mode.
app = typer.Typer(
    help="flowpark: durable flows that wait on external systems.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"flowpark {version('flowpark')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("flowpark (not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False,
        "--version",
        help="Print the version and exit.",
        callback=_print_version,
        is_eager=True,
    ),
) -> None:
    """flowpark: durable flows that wait on external systems."""


db_app = typer.Typer(help="Database schema commands.", no_args_is_help=True)
flows_app = typer.Typer(help="Flow definition commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(flows_app, name="flows")


def _logging(level: str) -> None:
    """Every log line carries the node id (``[node]``): see :mod:`flowpark.runtime.logs`.

    :func:`flowpark.runtime.logs.log_config` (applied here, and handed to uvicorn so each worker
    process applies it too) keeps the ``apscheduler`` logger at ERROR below ``debug``: its
    "Execution of job ... skipped: maximum number of running instances reached (1)"
    warning comes about once a scan interval whenever a sweep outlasts the interval, which
    is normal under load (the sweep keeps working through due instances).
    """
    from flowpark.runtime.logs import configure_logging

    configure_logging(level)


def _refuse(exc: Exception) -> typer.Exit:
    """Print ``error: <code>: <message>`` (one line) and return the exit to raise."""
    from flowpark.errors import ErrorCode, FlowparkError
    from flowpark.redaction import redact

    code = exc.code if isinstance(exc, FlowparkError) else ErrorCode.STORE_UNAVAILABLE
    typer.echo(f"error: {code}: {redact(_one_line(exc))}", err=True)
    return typer.Exit(EXIT_STORE)


def _flows_or_exit(given: list[str] | None) -> list[str]:
    """Load and check the flows a node will serve before anything starts.

    Returns the targets (paths made absolute) and puts them in ``FLOWPARK_FLOWS`` so the
    app factory (and every worker process) loads the same ones. A definition error prints
    one line per finding and exits :data:`EXIT_FLOWS_INVALID`; a target that cannot be
    loaded prints one line and exits :data:`EXIT_FLOWS_UNLOADABLE`.
    """
    from flowpark.errors import DefinitionError, FlowsUnloadable
    from flowpark.flows import Catalog
    from flowpark.runtime.http import outbound_client
    from flowpark.runtime.loading import Deps, load_flows, register_flows
    from flowpark.settings import Settings

    settings = Settings()
    targets = [_absolute(t) for t in (given or settings.flow_targets)]
    try:
        flows = load_flows(targets, Deps(outbound_client(1.0), settings))
        register_flows(Catalog(), flows)
    except FlowsUnloadable as exc:
        typer.echo(f"error: {exc.code}: {_one_line(exc.message)}", err=True)
        raise typer.Exit(EXIT_FLOWS_UNLOADABLE) from None
    except DefinitionError as exc:
        for finding in exc.findings:
            typer.echo(_one_line(finding), err=True)
        raise typer.Exit(EXIT_FLOWS_INVALID) from None
    os.environ["FLOWPARK_FLOWS"] = ",".join(targets)
    return targets


def _absolute(target: str) -> str:
    """A path target as an absolute path (worker processes and reloads may run elsewhere);
    a module path stays as it is."""
    from flowpark.runtime.loading import is_path

    return str(Path(target).expanduser().resolve()) if is_path(target) else target


def _warn_unknown_settings(targets: list[str]) -> None:
    """One ``warning:`` line on stderr for each ``FLOWPARK_*`` variable that names no
    setting (a typo is otherwise silently ignored), with the closest setting's name."""
    from flowpark.settings import unknown_names

    known: list[str] = []
    if "samples" in targets:
        from flowpark.samples.settings import SampleSettings

        known = [f"FLOWPARK_{name.upper()}" for name in SampleSettings.model_fields]
    for name, close in unknown_names(os.environ, known):
        hint = f" (did you mean {close}?)" if close else ""
        typer.echo(
            f"warning: {name} is no flowpark setting and is ignored{hint}; "
            "docs/settings.md lists them",
            err=True,
        )


def _database_or_exit(url: str) -> None:
    from flowpark.cli.serving import check_database
    from flowpark.errors import FlowparkError

    try:
        check_database(url)
    except FlowparkError as exc:
        raise _refuse(exc) from None


@db_app.command("upgrade")
def db_upgrade(
    url: str = typer.Option(
        None,
        "--url",
        metavar="URL",
        help="Database URL (default: FLOWPARK_DATABASE_URL or sqlite:///flowpark.db)",
    ),
) -> None:
    """Migrate the database to the latest schema (Alembic upgrade head)."""
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from flowpark.errors import StoreUnavailable
    from flowpark.redaction import redact_url, register_secrets
    from flowpark.settings import Settings
    from flowpark.store.db import parse_url, sqlite_folder_missing, sync_url
    from flowpark.store.migrate import upgrade

    settings = Settings()
    target = url or settings.database_url
    register_secrets(settings.secret_values())
    try:
        sync_url(target)
        folder = sqlite_folder_missing(target)
    except (ValueError, ArgumentError) as exc:  # not a database URL: one line
        raise _refuse(StoreUnavailable(f"invalid database URL: {exc}")) from None
    if folder is not None:  # SQLite would say only "unable to open database file"
        raise _refuse(
            StoreUnavailable(
                f"cannot create the SQLite database at {redact_url(target)}: directory "
                f"{folder} does not exist (create it first, or name another path)"
            )
        )
    try:
        upgrade(target)
    except DBAPIError as exc:  # unreachable: one line, no traceback
        shown = parse_url(target).render_as_string(hide_password=True)
        raise _refuse(
            StoreUnavailable(f"cannot migrate the database at {shown}: {exc.orig}")
        ) from None
    typer.echo(f"database at head: {redact_url(target)}")


@app.command()
def serve(
    host: HostOpt = "127.0.0.1",
    port: int = typer.Option(
        8000, "--port", min=0, max=65535, metavar="PORT", help="0: any free port."
    ),
    workers: int = typer.Option(
        1,
        min=1,
        metavar="N",
        help="uvicorn worker processes (each sweeps). With more than one and "
        "neither FLOWPARK_OCR_BASE_URL nor FLOWPARK_JOBS_BASE_URL set, serve also "
        "runs `flowpark fakes` on a free loopback port for all of them.",
    ),
    log_level: LogLevelOpt = LogLevel.INFO,
    flows: FlowsOpt = None,
) -> None:
    """Run a node with the HTTP API and the sweep (every node sweeps).

    Exit codes: 1 when the host and port cannot be listened on (one line: which, and why);
    2 when an option or a ``FLOWPARK_*`` setting is invalid (one line: which, and why);
    3 (``error: <code>: ...``) when the database is unreachable or not migrated (run
    ``flowpark db upgrade``); 4 when a flow breaks a definition rule (one line per finding:
    severity, rule code, flow, step); 5 when a flows target cannot be loaded.
    """
    from flowpark.runtime.heap import hold_collector, release_collector

    if (
        workers == 1
    ):  # the node runs in this process: until it has started, see flowpark.runtime.heap
        hold_collector()
    try:
        _serve(host, port, workers, log_level, flows)
    finally:
        release_collector()


def _serve(host: str, port: int, workers: int, log_level: str, flows: list[str] | None) -> None:
    import uvicorn

    from flowpark.cli.serving import shared_fakes, tcp_socket
    from flowpark.runtime.logs import log_config
    from flowpark.settings import Settings

    targets = _flows_or_exit(flows)
    _warn_unknown_settings(targets)
    _database_or_exit(Settings().database_url)
    os.environ.setdefault("FLOWPARK_SELF_URL", f"http://{host}:{port}")
    os.environ.setdefault("FLOWPARK_GC_FREEZE", "true")  # a node process: see flowpark.runtime.heap
    ocr_set = bool(os.environ.get("FLOWPARK_OCR_BASE_URL"))
    jobs_set = bool(os.environ.get("FLOWPARK_JOBS_BASE_URL"))
    samples = "samples" in targets
    with ExitStack() as stack:
        if workers > 1 and samples and not ocr_set and not jobs_set:
            fakes_url = stack.enter_context(shared_fakes(log_level))
            # every worker process inherits these: one provider for all of them, which
            # calls the webhook back on the serve URL
            os.environ["FLOWPARK_OCR_BASE_URL"] = fakes_url
            os.environ["FLOWPARK_JOBS_BASE_URL"] = fakes_url
            os.environ.setdefault("FLOWPARK_PUBLIC_BASE_URL", os.environ["FLOWPARK_SELF_URL"])
            typer.echo(
                f"info: --workers {workers}: the fake OCR and job services run in one "
                f"`flowpark fakes` process for all workers, on {fakes_url} (stopped "
                "with serve)",
                err=True,
            )
        elif workers > 1 and samples and ocr_set != jobs_set:
            unset = "FLOWPARK_JOBS_BASE_URL" if ocr_set else "FLOWPARK_OCR_BASE_URL"
            typer.echo(
                f"warning: {unset} is not set: with --workers > 1 each worker serves "
                "its own in-memory fake for it; point it at the same provider",
                err=True,
            )
        if workers > 1:
            from flowpark.runtime.metrics import multiprocess_dir

            # the workers write their metrics to files there; a scrape of any of them
            # answers the figures of all
            stack.enter_context(multiprocess_dir())
        _logging(log_level)
        from flowpark.runtime.forwarded import forwarded_options
        from flowpark.runtime.protocol import BoundedHttpToolsProtocol

        node_settings = Settings()
        config = uvicorn.Config(
            "flowpark.runtime.app:create_app",
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            factory=True,
            log_config=log_config(log_level),
            # request head size and count, head and body time: bounded per connection
            http=BoundedHttpToolsProtocol,
            timeout_keep_alive=node_settings.keep_alive_seconds,
            # forwarded headers only from FLOWPARK_FORWARDED_ALLOW_IPS's proxies
            **forwarded_options(node_settings),
        )
        sock = tcp_socket(host, port)
        if workers > 1:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(config, sockets=[sock]).run()
            return
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
        if not server.started:
            raise typer.Exit(3)


@app.command()
def worker(
    log_level: LogLevelOpt = LogLevel.INFO,
    flows: FlowsOpt = None,
    metrics_port: int = typer.Option(
        None,
        min=1,
        metavar="PORT",
        max=65535,
        help="Serve Prometheus metrics on this port at /metrics (default: "
        "FLOWPARK_METRICS_PORT; none). Bound to FLOWPARK_METRICS_HOST (default 127.0.0.1).",
    ),
) -> None:
    """Run a node that only sweeps (no HTTP API): another node of the same database.

    Serve the same flows as the other nodes. Exit codes as ``serve``: 2 when an option or a
    ``FLOWPARK_*`` setting is invalid, 3 when the database is unreachable or not migrated,
    4 on a definition error, 5 when flows cannot be loaded.
    """
    from flowpark.runtime.heap import hold_collector, release_collector

    hold_collector()  # until the worker has started: see flowpark.runtime.heap
    try:
        _worker(log_level, flows, metrics_port)
    finally:
        release_collector()


def _worker(log_level: str, flows: list[str] | None, metrics_port: int | None) -> None:
    from flowpark.cli.demo import port_refused
    from flowpark.runtime.worker import run_worker
    from flowpark.settings import Settings

    _warn_unknown_settings(_flows_or_exit(flows))
    if metrics_port is not None:
        os.environ["FLOWPARK_METRICS_PORT"] = str(metrics_port)
    settings = Settings()
    _database_or_exit(settings.database_url)
    if settings.metrics_enabled and settings.metrics_port is not None:
        host, port = settings.metrics_host, settings.metrics_port
        refused = port_refused(host, port)
        if refused is not None:  # one line, as serve's own port
            typer.echo(f"error: cannot listen on {host}:{port} (metrics): {refused}", err=True)
            raise typer.Exit(1)
    _logging(log_level)
    from flowpark.runtime.loop import run

    os.environ.setdefault("FLOWPARK_GC_FREEZE", "true")  # a node process: see flowpark.runtime.heap
    run(run_worker())


@app.command()
def fakes(
    host: HostOpt = "127.0.0.1",
    port: int = typer.Option(
        8100, "--port", min=0, max=65535, metavar="PORT", help="0: any free port."
    ),
    per_page: float = typer.Option(
        None,
        min=0,
        metavar="SECONDS",
        help="Seconds the fake OCR takes per page (default: FLOWPARK_SAMPLE_OCR_PER_PAGE).",
    ),
    callback_token: str = typer.Option(
        None,
        metavar="TOKEN",
        help="The key of the OCR callbacks' tokens (each job's: its instance's only) and of "
        "the admin token (default: FLOWPARK_SAMPLE_CALLBACK_TOKEN, else derived from "
        "FLOWPARK_API_TOKENS; nodes must use the same); callbacks go only below the node's "
        "public base URL (FLOWPARK_PUBLIC_BASE_URL, else FLOWPARK_SELF_URL).",
    ),
    rate_limit: float = typer.Option(
        None,
        min=0.001,
        metavar="N",
        help="Calls per second the fake OCR admits; beyond it, 429 with Retry-After (default: "
        "FLOWPARK_OCR_RATE_LIMIT, else none; burst: FLOWPARK_OCR_RATE_BURST).",
    ),
    log_level: LogLevelOpt = LogLevel.INFO,
) -> None:
    """Serve the fake OCR and job services alone, in their own process.

    With several nodes, point every node's FLOWPARK_OCR_BASE_URL (and
    FLOWPARK_JOBS_BASE_URL) at this server: a job uploaded through one node is read by
    whichever node sweeps the instance next. The fake OCR counts its calls per 100 ms and
    can refuse calls (a rate, a pushback window): see docs/providers.md.
    """
    from flowpark.cli.serving import serve_fakes

    _logging(log_level)
    serve_fakes(host, port, log_level, per_page, callback_token, rate_limit)


@flows_app.command("check")
def flows_check(
    target: list[str] = typer.Argument(
        None,
        metavar="TARGET",
        help="flows targets, as --flows (default: FLOWPARK_FLOWS, else the samples)",
    ),
    flows: FlowsOpt = None,
) -> None:
    """Check flow definitions; prints every finding (errors and warnings), one per line.

    Exit codes:

    - 0: no error (warnings allowed);
    - 1: at least one rule error;
    - 2: cannot load (a target fails to import, building a flow raised, e.g. on a
      negative duration, or it defines no flows).
    """
    from flowpark.runtime.loading import check_targets
    from flowpark.settings import Settings

    targets = [*(target or []), *(flows or [])] or Settings().flow_targets
    raise typer.Exit(check_targets(targets, typer.echo))


def _seconds(value: float, least: float | None) -> float:
    """``value`` if it is a finite number of seconds of at least ``least`` (None: more than 0).

    Raises:
        typer.BadParameter: it is not (exit 2, the option named).
    """
    if not math.isfinite(value) or (value < least if least is not None else value <= 0):
        bound = f"at least {least:g}" if least is not None else "more than 0"
        raise typer.BadParameter(f"{value} is not a number of seconds {bound}")
    return value


@app.command()
def demo(
    host: HostOpt = "127.0.0.1",
    port: int = typer.Option(
        8000, "--port", min=0, max=65535, metavar="PORT", help="0: any free port."
    ),
    pages: int = typer.Option(
        12, min=1, max=10_000, metavar="N", help="The demo documents' page count."
    ),
    per_page: float = typer.Option(
        2.0,
        callback=lambda v: _seconds(v, 0.0),
        metavar="SECONDS",
        help="Seconds the fake OCR takes per page (>= 0).",
    ),
    scan_interval: float = typer.Option(
        1.0,
        callback=lambda v: _seconds(v, None),
        metavar="SECONDS",
        help="Seconds between two sweeps (> 0).",
    ),
    database_url: str = typer.Option("sqlite:///flowpark.db", metavar="URL"),
) -> None:
    """Run the demo: migrate, serve the samples, send documents and print their progress.

    It sends a demo document and prints its progress until it completes, then a second one
    that the fake OCR's webhook ends at once, then stops the server.

    Exit codes: 2 when the port cannot be listened on (one line: which port, and how to
    choose another) or an option is out of its range (before anything is served); 3 when
    the database cannot be migrated; 1 when a document did not complete.
    """
    from flowpark.cli.demo import run_demo

    _logging("warning")
    raise typer.Exit(
        run_demo(
            host=host,
            port=port,
            pages=pages,
            per_page=per_page,
            scan_interval=scan_interval,
            database_url=database_url,
        )
    )


def _settings_refusal(exc: Exception) -> str | None:
    """One line naming each ``FLOWPARK_*`` variable that ``exc`` refuses, and why; None when
    ``exc`` is not about the settings. The variables' values are never shown (a webhook
    secret or a token may be among them)."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from flowpark.redaction import redact

    if isinstance(exc, ValidationError) and exc.title in ("Settings", "SampleSettings"):
        parts = []
        for error in exc.errors(include_input=False, include_url=False, include_context=False):
            loc = [str(part) for part in error["loc"]]
            variable = f"FLOWPARK_{loc[0].upper()}" if loc else "settings"
            where = f"{variable} ({'.'.join(loc)})" if len(loc) > 1 else variable
            parts.append(f"{where}: {error['msg']}")
        return redact(_one_line("; ".join(parts)))
    if isinstance(exc, SettingsError):
        field = re.search(r'field "(\w+)"', str(exc))
        where = f"FLOWPARK_{field[1].upper()} cannot be parsed" if field else str(exc)
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        return redact(_one_line(f"{where}{cause}"))
    return None


def main() -> None:
    """The ``flowpark`` console script: run the typer app (exit codes as each command says).

    A ``FLOWPARK_*`` variable that does not validate is one line ``error: settings_invalid:
    ...`` on stderr and exit code :data:`EXIT_SETTINGS`, never a traceback; a usage error
    found by the command line's parser (an unknown option, a value not among the choices)
    is one line ``error: usage: ...`` and exit code 2.
    """
    from flowpark.cli.parsing import run_parsed
    from flowpark.errors import ErrorCode

    try:
        code = run_parsed(app)
    except Exception as exc:
        refusal = _settings_refusal(exc)
        if refusal is None:
            raise
        typer.echo(f"error: {ErrorCode.SETTINGS_INVALID}: {refusal}", err=True)
        raise SystemExit(EXIT_SETTINGS) from None
    raise SystemExit(code)


def _mount_operator_commands() -> None:
    from flowpark.cli import add_operator_commands

    add_operator_commands(app, flows_app)


_mount_operator_commands()


if __name__ == "__main__":
    main()
