"""A real event subscriber for the delivery tests: ``python tests/e2e/subscriber.py PORT
SECRET LOG [DELAY_SECONDS]``.

``POST /hook`` verifies the Standard Webhooks signature with the ``standardwebhooks``
library (401 when it does not verify) and appends what it received to ``LOG`` (JSON lines,
kept across restarts); it answers 204 after ``DELAY_SECONDS``. ``GET /received`` lists the
accepted deliveries in arrival order, ``GET /rejected`` counts refused ones.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import uvicorn
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


def build(secret: str, log: Path, delay: float) -> Starlette:
    hook = Webhook(secret)
    received: list[dict[str, object]] = []
    if log.exists():
        received.extend(json.loads(line) for line in log.read_text().splitlines() if line)
    rejected = [0]
    out = log.open("a")

    async def accept(request: Request) -> Response:
        body = await request.body()
        try:
            data = hook.verify(body, dict(request.headers))
        except WebhookVerificationError:
            rejected[0] += 1
            return Response(status_code=401)
        if delay:
            await asyncio.sleep(delay)
        entry = {"webhookId": request.headers["webhook-id"], **data}
        received.append(entry)
        out.write(json.dumps(entry) + "\n")
        out.flush()
        return Response(status_code=204)

    async def listing(request: Request) -> JSONResponse:
        return JSONResponse(received)

    async def refused(request: Request) -> JSONResponse:
        return JSONResponse({"rejected": rejected[0]})

    return Starlette(
        routes=[
            Route("/hook", accept, methods=["POST"]),
            Route("/received", listing),
            Route("/rejected", refused),
        ]
    )


if __name__ == "__main__":
    port, secret, log = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    uvicorn.run(build(secret, log, delay), host="127.0.0.1", port=port, log_level="warning")
