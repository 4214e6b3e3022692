"""The ``flowpark`` command: serve, worker, fakes, db upgrade, flows check, demo."""

from __future__ import annotations

import asyncio
import os

import typer

__all__ = ["app", "main"]

app = typer.Typer(help="flowpark: durable flows that wait on external systems.",
                  no_args_is_help=True)
db_app = typer.Typer(help="Database schema commands.", no_args_is_help=True)
flows_app = typer.Typer(help="Flow definition commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(flows_app, name="flows")


def _logging(level: str) -> None:
    """Every log line carries the node id (``[node]``): see :mod:`app.runtime.logs`."""
    from app.runtime.logs import configure_logging

    configure_logging(level)


@db_app.command("upgrade")
def db_upgrade(url: str = typer.Option(None, help="Database URL (default: "
                                       "FLOWPARK_DATABASE_URL or sqlite:///flowpark.db)")
               ) -> None:
    """Migrate the database to the latest schema (Alembic upgrade head)."""
    from app.settings import Settings
    from app.store.migrate import upgrade

    target = url or Settings().database_url
    upgrade(target)
    typer.echo(f"database at head: {target}")


@app.command()
def serve(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8000),
          workers: int = typer.Option(1, help="uvicorn worker processes (each sweeps)"),
          log_level: str = typer.Option("info")) -> None:
    """Run a node with the HTTP API and the sweep (every node sweeps)."""
    import uvicorn

    from app.runtime.logs import log_config

    os.environ.setdefault("FLOWPARK_SELF_URL", f"http://{host}:{port}")
    if workers > 1 and not os.environ.get("FLOWPARK_OCR_BASE_URL"):
        typer.echo("warning: with --workers > 1 each worker has its own in-memory fake OCR; "
                   "run `flowpark fakes` and set FLOWPARK_OCR_BASE_URL (and "
                   "FLOWPARK_JOBS_BASE_URL) so every worker sees the same provider", err=True)
    _logging(log_level)
    uvicorn.run("app.runtime.app:create_app", host=host, port=port, workers=workers,
                log_level=log_level, factory=True, log_config=log_config(log_level))


@app.command()
def worker(log_level: str = typer.Option("info")) -> None:
    """Run a node that only sweeps (no HTTP): another node of the same database."""
    from app.runtime.worker import run_worker

    _logging(log_level)
    asyncio.run(run_worker())


@app.command()
def fakes(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8100),
          per_page: float = typer.Option(
              None, min=0, help="Seconds the fake OCR takes per page "
              "(default: FLOWPARK_SAMPLE_OCR_PER_PAGE)."),
          callback_token: str = typer.Option(
              None, help="Bearer token on OCR callbacks (default: the first of "
              "FLOWPARK_API_TOKENS)."),
          log_level: str = typer.Option("info")) -> None:
    """Serve the fake OCR and job services alone, in their own process.

    With several nodes, point every node's FLOWPARK_OCR_BASE_URL (and
    FLOWPARK_JOBS_BASE_URL) at this server: a job uploaded through one node is read by
    whichever node sweeps the instance next.
    """
    import uvicorn

    from app.runtime.fakes import create_fakes_server
    from app.runtime.logs import log_config, set_node_id

    set_node_id(f"fakes-{port}")
    _logging(log_level)
    uvicorn.run(create_fakes_server(per_page=per_page, callback_token=callback_token),
                host=host, port=port, log_level=log_level, log_config=log_config(log_level))


@flows_app.command("check")
def flows_check(target: str = typer.Argument(
        "samples.registry", help="module (or path to a .py file) defining flows")) -> None:
    """Check flow definitions; prints every finding and exits 1 on any error."""
    from app.flows.check import check_target

    code = check_target(target, typer.echo)
    raise typer.Exit(code)


@app.command()
def demo(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8000),
         pages: int = typer.Option(12), per_page: float = typer.Option(2.0),
         scan_interval: float = typer.Option(1.0),
         database_url: str = typer.Option("sqlite:///flowpark.db")) -> None:
    """Migrate, start the server with the samples, send a demo document, print its
    progress until it completes, then stop."""
    from app.demo import run_demo

    _logging("warning")
    raise typer.Exit(run_demo(host=host, port=port, pages=pages, per_page=per_page,
                              scan_interval=scan_interval, database_url=database_url))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
