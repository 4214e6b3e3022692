"""The HTTP ceiling: a bare FastAPI route on the same uvicorn settings as the start route.

``python -m bench.ceiling --port P`` serves one ``POST /api/v1/documents`` route that reads
the same JSON body into a pydantic model and answers 202 with a small JSON object: no
database, no auth, no middleware. uvicorn runs it exactly as :mod:`bench.serve` runs
flowpark (``uvicorn.Config`` defaults: uvloop and httptools, log level warning, no access
log, lifespan on, a socket bound with ``IPPROTO_TCP``). What a flowpark start costs the
server above this route is flowpark's own work; :func:`spawn_ceiling` starts it in its own
process for the ``http`` figure of ``bench compare``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import BaseModel

__all__ = ["Document", "build_app", "spawn_ceiling"]


class Document(BaseModel):
    """The start route's body (its wire names)."""

    documentId: str  # noqa: N815
    contentType: str  # noqa: N815
    pages: int


def build_app() -> object:
    """The bare app: ``GET /healthz`` and the start route's shape, nothing else."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/api/v1/documents", status_code=202)
    async def start(document: Document) -> JSONResponse:
        body = {
            "instanceId": uuid.uuid4().hex,
            "status": "suspended",
            "documentId": document.documentId,
        }
        return JSONResponse(body, status_code=202)

    return app


@contextmanager
def spawn_ceiling() -> Iterator[object]:
    """The bare route in its own uvicorn process on loopback (a :class:`bench.common.Server`)."""
    from bench.common import REPO, Server, _log_file, _wait_http, free_port

    port = free_port()
    log = _log_file("ceiling")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.ceiling", "--port", str(port)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    try:
        _wait_http(f"{server.base_url}/healthz", proc, log)
        yield server
    finally:
        server.stop()
        log.unlink(missing_ok=True)


def main() -> None:
    import uvicorn

    from bench.serve import bound_socket

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    config = uvicorn.Config(build_app(), log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[bound_socket(args.port)])


if __name__ == "__main__":
    main()
