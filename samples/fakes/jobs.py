"""A fake job runner, served over HTTP under ``/fake/jobs``.

A job is started with an idempotent ``PUT`` under a caller-chosen id. Its state then follows
the service's UTC clock: ``QUEUED`` for ``queued_for`` after the start, then ``RUNNING``, then
``SUCCEEDED`` once ``succeed_after`` (counted from the start) has passed. Tests and demos can
force an outcome with the ``complete`` and ``fail`` routes. State is in memory, and with a
``state_file`` also appended to that file and read back at start-up (jobs outlive a restart).

Routes (prefix ``/fake/jobs``):

* ``PUT /{jobId}`` (body optional ``{"input": any}``; optional ``Idempotency-Key``: a repeat
  answers the job the key's first call started) -> 201 new / 200 existing, the job view
* ``GET /{jobId}`` -> ``{"jobId", "state", "result", "error"}``
* ``POST /{jobId}/complete`` -> the job view, ``SUCCEEDED`` (admin)
* ``POST /{jobId}/fail`` (body optional ``{"reason": str}``) -> the job view, ``FAILED``
  (admin: a loopback client, or one with the admin token; else 403
  ``{"code": "fake.admin_only"}``, see :mod:`flowpark.samples.fakes.admin`)

Unknown jobs answer 404 ``{"code": "job.not_found"}``; completing a failed job or failing a
succeeded one answers 409 ``{"code": "job.already_finished", "state": ...}``.
"""

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Body, Header, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from flowpark.engine.clock import ensure_utc
from flowpark.samples.fakes.admin import admin_refusal

__all__ = [
    "DEFAULT_FAIL_REASON",
    "FakeJobService",
    "JobAlreadyFinished",
    "JobFailRequest",
    "JobNotFound",
    "JobStartRequest",
    "JobState",
    "JobView",
    "create_jobs_router",
    "job_output",
]

JobState = Literal["QUEUED", "RUNNING", "SUCCEEDED", "FAILED"]

DEFAULT_FAIL_REASON = "job failed"
"""``error`` of a job failed without a ``reason``."""


def _system_utc_now() -> datetime:
    return datetime.now(UTC)


def job_output(job_id: str) -> dict[str, Any]:
    """Return the result a succeeded job reports: ``{"jobId": ..., "output": "job <id> done"}``."""
    return {"jobId": job_id, "output": f"job {job_id} done"}


class _CamelModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class JobStartRequest(_CamelModel):
    """Optional body of ``PUT /fake/jobs/{jobId}``.

    Attributes:
        input: any JSON value; stored with the job, not interpreted.
    """

    input: Any = None


class JobFailRequest(_CamelModel):
    """Optional body of ``POST /fake/jobs/{jobId}/fail``.

    Attributes:
        reason: becomes the job's ``error`` (default ``"job failed"``).
    """

    reason: str | None = Field(default=None, max_length=2048)


class JobView(_CamelModel):
    """One job as the routes report it.

    Attributes:
        job_id: the caller-chosen id (``jobId``).
        state: ``QUEUED``, ``RUNNING``, ``SUCCEEDED`` or ``FAILED``.
        result: :func:`job_output` once ``SUCCEEDED``, else null.
        error: the failure reason once ``FAILED``, else null.
    """

    job_id: str
    state: JobState
    result: dict[str, Any] | None = None
    error: str | None = None


class JobNotFound(LookupError):
    """No job has this id (HTTP 404, code ``job.not_found``)."""

    code = "job.not_found"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id!r} not found")
        self.job_id = job_id


class JobAlreadyFinished(RuntimeError):
    """The job already ended the other way (HTTP 409, code ``job.already_finished``)."""

    code = "job.already_finished"

    def __init__(self, job_id: str, state: JobState) -> None:
        super().__init__(f"job {job_id!r} already {state}")
        self.job_id = job_id
        self.state = state


@dataclass
class _Job:
    job_id: str
    input: Any
    started_at: datetime
    forced_state: JobState | None = None
    error: str | None = None
    finished_at: datetime | None = None


class FakeJobService:
    """In-memory state of the fake job runner.

    Args:
        queued_for: how long a job stays ``QUEUED`` after its start (default 2 s).
        succeed_after: time from start until the job is ``SUCCEEDED`` (default 6 s).
        now: clock returning aware UTC datetimes (naive results are taken as UTC); default the
            system clock in UTC.
        state_file: a JSON-lines file that keeps the jobs across restarts (read at
            construction when it exists; every start and forced outcome is appended);
            None (default): memory only.

    Attributes:
        calls: requests served, keyed by route name (``start``, ``status``, ``complete``,
            ``fail``).
    """

    def __init__(
        self,
        queued_for: timedelta = timedelta(seconds=2),
        succeed_after: timedelta = timedelta(seconds=6),
        now: Callable[[], datetime] | None = None,
        state_file: Path | None = None,
    ) -> None:
        if queued_for < timedelta(0) or succeed_after < timedelta(0):
            raise ValueError("queued_for and succeed_after must be >= 0")
        self.queued_for = queued_for
        self.succeed_after = succeed_after
        self._now = now or _system_utc_now
        self.calls: Counter[str] = Counter()
        self._jobs: dict[str, _Job] = {}
        self._by_key: dict[str, str] = {}  # Idempotency-Key -> the job its first start named
        self.state_file = state_file
        if state_file is not None and state_file.exists():
            self._replay(state_file)

    def now(self) -> datetime:
        """Return the service clock's current instant (aware UTC)."""
        return ensure_utc(self._now())

    def start(
        self, job_id: str, input: Any = None, idempotency_key: str | None = None
    ) -> tuple[JobView, bool]:
        """Start ``job_id`` unless it exists (idempotent); a repeat of ``idempotency_key``
        answers the job its first call named, whatever ``job_id`` it names now.

        Args:
            job_id: caller-chosen id.
            input: stored with a new job; ignored when the job exists.
            idempotency_key: the caller's key for this start (the ``Idempotency-Key``
                header), or None.

        Returns:
            The job's view and whether this call created it.
        """
        if idempotency_key is not None:
            first = self._by_key.setdefault(idempotency_key, job_id)
            if first in self._jobs:
                return self._view(self._jobs[first]), False
            job_id = first
        job = self._jobs.get(job_id)
        if job is not None:
            return self._view(job), False
        job = _Job(job_id=job_id, input=input, started_at=self.now())
        self._record(
            {
                "op": "start",
                "jobId": job_id,
                "input": input,
                "startedAt": job.started_at.isoformat(),
                "key": idempotency_key,
            }
        )
        self._jobs[job_id] = job
        return self._view(job), True

    def get(self, job_id: str) -> JobView:
        """Return one job's current view.

        Raises:
            JobNotFound: unknown ``job_id``.
        """
        return self._view(self._job(job_id))

    def complete(self, job_id: str) -> JobView:
        """Make the job ``SUCCEEDED`` now (idempotent).

        Raises:
            JobNotFound: unknown ``job_id``.
            JobAlreadyFinished: the job has ``FAILED``.
        """
        job = self._job(job_id)
        state = self._state(job)
        if state == "FAILED":
            raise JobAlreadyFinished(job_id, state)
        if job.forced_state is None:
            job.forced_state = "SUCCEEDED"
            job.finished_at = self.now()
            self._record_forced(job)
        return self._view(job)

    def fail(self, job_id: str, reason: str | None = None) -> JobView:
        """Make the job ``FAILED`` now with ``error = reason`` (idempotent: keeps the first reason).

        Raises:
            JobNotFound: unknown ``job_id``.
            JobAlreadyFinished: the job has ``SUCCEEDED``.
        """
        job = self._job(job_id)
        state = self._state(job)
        if state == "SUCCEEDED":
            raise JobAlreadyFinished(job_id, state)
        if job.forced_state is None:
            job.forced_state = "FAILED"
            job.error = reason or DEFAULT_FAIL_REASON
            job.finished_at = self.now()
            self._record_forced(job)
        return self._view(job)

    def input_of(self, job_id: str) -> Any:
        """Return the ``input`` the job was started with.

        Raises:
            JobNotFound: unknown ``job_id``.
        """
        return self._job(job_id).input

    def _record(self, entry: dict[str, Any]) -> None:
        """Append one change to :attr:`state_file` (handed to the operating system before
        the change is answered: a killed process keeps it)."""
        if self.state_file is not None:
            with self.state_file.open("a", encoding="utf-8") as out:
                out.write(json.dumps(entry) + "\n")

    def _record_forced(self, job: _Job) -> None:
        at = job.finished_at.isoformat() if job.finished_at else None
        self._record(
            {
                "op": "forced",
                "jobId": job.job_id,
                "state": job.forced_state,
                "error": job.error,
                "at": at,
            }
        )

    def _replay(self, path: Path) -> None:
        """Rebuild the jobs from ``path`` (a torn last line, from a kill mid-write, is
        ignored)."""
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("op") == "start":
                self._jobs[entry["jobId"]] = _Job(
                    job_id=entry["jobId"],
                    input=entry["input"],
                    started_at=datetime.fromisoformat(entry["startedAt"]),
                )
                if entry.get("key") is not None:
                    self._by_key[entry["key"]] = entry["jobId"]
            elif entry.get("op") == "forced" and entry.get("jobId") in self._jobs:
                job = self._jobs[entry["jobId"]]
                job.forced_state, job.error = entry["state"], entry["error"]
                job.finished_at = datetime.fromisoformat(entry["at"]) if entry["at"] else None

    def _job(self, job_id: str) -> _Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def _state(self, job: _Job) -> JobState:
        if job.forced_state is not None:
            return job.forced_state
        elapsed = self.now() - job.started_at
        if elapsed >= self.succeed_after:
            return "SUCCEEDED"
        if elapsed >= self.queued_for:
            return "RUNNING"
        return "QUEUED"

    def _view(self, job: _Job) -> JobView:
        state = self._state(job)
        return JobView(
            job_id=job.job_id,
            state=state,
            result=job_output(job.job_id) if state == "SUCCEEDED" else None,
            error=job.error if state == "FAILED" else None,
        )


def _not_found(exc: JobNotFound) -> JSONResponse:
    return JSONResponse(status_code=404, content={"code": exc.code})


def _conflict(exc: JobAlreadyFinished) -> JSONResponse:
    return JSONResponse(status_code=409, content={"code": exc.code, "state": exc.state})


def create_jobs_router(service: FakeJobService, admin_token: str | None = None) -> APIRouter:
    """Build the ``/fake/jobs`` routes over ``service``.

    Args:
        service: the state the routes read and change.
        admin_token: the bearer token the admin routes (complete, fail) take from a client
            off loopback; None: loopback clients only.

    Returns:
        An ``APIRouter`` with prefix ``/fake/jobs`` (see the module docstring for routes).
    """
    router = APIRouter(prefix="/fake/jobs", tags=["fake-jobs"])
    not_found: dict[int | str, dict[str, Any]] = {
        404: {"description": 'Unknown job: `{"code": "job.not_found"}`'}
    }
    conflict: dict[int | str, dict[str, Any]] = {
        409: {"description": "Already ended the other way: `job.already_finished`"}
    }

    @router.put(
        "/{job_id}",
        status_code=201,
        response_model=JobView,
        responses={200: {"model": JobView, "description": "The job already existed"}},
    )
    async def start(
        job_id: str,
        response: Response,
        body: JobStartRequest | None = Body(default=None),
        idempotency_key: str | None = Header(default=None, max_length=200),
    ) -> JobView:
        service.calls["start"] += 1
        view, created = service.start(
            job_id, body.input if body is not None else None, idempotency_key
        )
        if not created:
            response.status_code = 200
        return view

    @router.get("/{job_id}", response_model=JobView, responses=not_found)
    async def status(job_id: str) -> Any:
        service.calls["status"] += 1
        try:
            return service.get(job_id)
        except JobNotFound as exc:
            return _not_found(exc)

    @router.post("/{job_id}/complete", response_model=JobView, responses={**not_found, **conflict})
    async def complete(job_id: str, request: Request) -> Any:
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        service.calls["complete"] += 1
        try:
            return service.complete(job_id)
        except JobNotFound as exc:
            return _not_found(exc)
        except JobAlreadyFinished as exc:
            return _conflict(exc)

    @router.post("/{job_id}/fail", response_model=JobView, responses={**not_found, **conflict})
    async def fail(
        job_id: str, request: Request, body: JobFailRequest | None = Body(default=None)
    ) -> Any:
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        service.calls["fail"] += 1
        try:
            return service.fail(job_id, body.reason if body is not None else None)
        except JobNotFound as exc:
            return _not_found(exc)
        except JobAlreadyFinished as exc:
            return _conflict(exc)

    return router
