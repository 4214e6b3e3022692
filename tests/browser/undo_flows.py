"""A flow whose compensation fails while a file exists (served with ``--flows`` by
``test_compensations``): ``undo.hold`` reserves (``undo.reserve``), then waits for
``undo.go``; its compensation ``undo.release`` raises while the file named by
``UNDO_FAILS_WHILE`` exists, and is tried once (so a cancel leaves it failed for good at
once)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from flowpark import (
    Capability,
    CapabilityOptions,
    Flow,
    HttpTrigger,
    RetryPolicy,
    Signal,
    StepContext,
)


class Hold(BaseModel):
    name: str = "x"


class Reservation(BaseModel):
    reservation_id: str


class Go(BaseModel):
    note: str = ""


class Reserve(Capability):
    id = "undo.reserve"
    idempotent = True
    puts = (Reservation,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Reservation(reservation_id=f"r-{ctx.execution_key[:8]}"))


class Release(Capability):
    id = "undo.release"
    idempotent = True
    reads = (Reservation,)
    options = CapabilityOptions(retry=RetryPolicy(maximum_tries=1))

    async def execute(self, ctx: StepContext) -> None:
        marker = os.environ.get("UNDO_FAILS_WHILE")
        if marker and Path(marker).exists():
            raise RuntimeError(
                f"the reservation service refused {ctx.get(Reservation).reservation_id}"
            )


undo_hold = (
    Flow("undo.hold", "1.0.0", input=Hold, trigger=HttpTrigger("POST", "/api/v1/holds"))
    .step(Reserve())
    .compensate_with(Release())
    .await_signal(Signal("undo.go", Go))
)
