"""A fake third-party OCR provider, served over HTTP under ``/fake/ocr``.

Documents are "uploaded" as OCR jobs; a job completes once ``pages * per_page`` has passed
since upload (measured on the service's UTC clock), or at once via the ``complete`` route.
A job uploaded with a ``callbackUrl`` is also completed by a real-time asyncio timer, and on
completion the service POSTs ``{"jobId": ..., "status": "completed"}`` to that URL in a
background task (``Authorization: Bearer <the job's callbackToken>``, ``Idempotency-Key:
ocr-<jobId>``), over one ``httpx.AsyncClient`` the service keeps for all its callbacks (a
client per callback cost ~70 ms of the loop's time each: a few hundred jobs finishing
together froze the service for seconds). The token is the one the upload gave: a caller can
name any allowed ``callbackUrl``, but only the uploader knows the token its route takes.

State is in memory, and with a ``state_file`` also appended to that file (one JSON line per
upload, cancel or early completion) and read back at start-up, so jobs outlive a restart of
the process, as a real provider's would (their timers do not: a job due meanwhile completes
on its next read, and calls back then). The fake is not flowpark's engine, so it uses plain
asyncio timers.

Routes (prefix ``/fake/ocr``):

* ``POST /jobs`` -> 201 ``{"jobId", "documentId", "status": "pending", "pages"}``; with an
  ``Idempotency-Key`` header, a repeat of the key answers the first job (200) and creates
  none; a ``callbackUrl`` outside the service's allowed callback bases -> 422
  ``{"code": "ocr.callback_not_allowed"}``
* ``GET /jobs`` -> ``[{"jobId", "documentId", "status"}]`` (admin)
* ``GET /jobs/{jobId}`` -> ``{"jobId", "documentId", "pages", "status", "text"}``
* ``POST /jobs/{jobId}/cancel`` -> ``{"jobId", "status"}`` (admin)
* ``POST /jobs/{jobId}/complete`` -> the job view (409 if the job was cancelled) (admin)
* ``/admin/load``, ``/admin/rate``, ``/admin/pushback`` (admin): the rate limit and the calls
  per 100 ms of :mod:`flowpark.samples.fakes.ratelimit`; beyond the rate, or in a scripted
  pushback window, ``POST /jobs`` and ``GET /jobs/{jobId}`` answer 429 (or 503) with
  ``Retry-After``

Unknown jobs answer 404 ``{"code": "ocr.job_not_found"}``. Admin routes answer a loopback
client, or one with the admin token, else 403 ``{"code": "fake.admin_only"}``
(:mod:`flowpark.samples.fakes.admin`).
"""

import asyncio
import json
import logging
import random
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from flowpark.engine.clock import ensure_utc
from flowpark.samples.fakes.ocr_models import (
    MAX_PAGES,
    OcrCallbackNotAllowed,
    OcrCancelResult,
    OcrJobAccepted,
    OcrJobCancelled,
    OcrJobNotFound,
    OcrJobStatus,
    OcrJobSummary,
    OcrJobView,
    OcrUploadRequest,
    ocr_text,
)
from flowpark.samples.fakes.ratelimit import RateGate

__all__ = [
    "MAX_PAGES",
    "FakeOcrService",
    "OcrCallbackNotAllowed",
    "OcrCancelResult",
    "OcrJobAccepted",
    "OcrJobCancelled",
    "OcrJobNotFound",
    "OcrJobStatus",
    "OcrJobSummary",
    "OcrJobView",
    "OcrUploadRequest",
    "ocr_text",
]

logger = logging.getLogger(__name__)

_RETRYABLE_STATUSES = frozenset({408, 425, 429})


def _retry_after(response: httpx.Response) -> float:
    """The seconds a ``Retry-After`` header asks for (0 when absent or not a number)."""
    try:
        return max(0.0, float(response.headers.get("Retry-After", "0")))
    except ValueError:
        return 0.0


def _system_utc_now() -> datetime:
    return datetime.now(UTC)


def _default_callback_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=10.0)


@dataclass
class _OcrJob:
    job_id: str
    document_id: str
    pages: int
    callback_url: str | None
    uploaded_at: datetime
    due_at: datetime
    status: OcrJobStatus = "pending"
    finished_at: datetime | None = None
    callback_scheduled: bool = False
    callback_token: str | None = None

    def view(self) -> OcrJobView:
        text = ocr_text(self.pages) if self.status == "completed" else None
        return OcrJobView(
            job_id=self.job_id,
            document_id=self.document_id,
            pages=self.pages,
            status=self.status,
            text=text,
        )


class FakeOcrService:
    """In-memory state of the fake OCR provider.

    Args:
        per_page: time each page takes; a job completes ``pages * per_page`` after upload
            (must be >= 0).
        now: clock returning aware UTC datetimes (naive results are taken as UTC); default the
            system clock in UTC. Job progress on reads is measured on this clock.
        callback_client_factory: builds the one ``httpx.AsyncClient`` every callback is
            sent with (made at the first callback, closed by :meth:`close`); default a
            client with a 10 s timeout.
        callback_token: sent as ``Authorization: Bearer <token>`` on the callbacks of a job
            whose upload gave no ``callbackToken`` (no header when None).
        callback_tries: tries per callback (default 12: with the default backoff a
            callback is retried for about half a minute to a minute, which outlasts a
            node's restart or a takeover, as a real provider's retries would).
        callback_backoff: real-time wait before the first retry (default 200 ms); each
            next wait doubles, up to ``callback_backoff_cap``, and is jittered (half to all
            of it, so callbacks failed together do not come back together); a
            ``Retry-After`` of a few seconds on a 429 or 503 is honoured up to the cap.
        callback_backoff_cap: longest wait between two tries (default 10 s).
        callback_bases: the only URL prefixes a ``callbackUrl`` may start with (same
            scheme, host and port, path below): flowpark's own base URL. Empty (default):
            no callback is accepted. The token goes nowhere else.
        state_file: a JSON-lines file that keeps the jobs across restarts (read at
            construction when it exists, appended to on every change); None (default):
            memory only.
        gate: the rate limit and load recorder in front of the upload and status routes
            (:class:`~flowpark.samples.fakes.ratelimit.RateGate`); default one with no limit
            (it only counts).

    Attributes:
        calls: requests served, keyed by route name (``upload``, ``list``, ``status``,
            ``cancel``, ``complete``; ``upload_repeat``: uploads answered from a known
            ``Idempotency-Key``).
        uploads_by_key: upload requests per ``Idempotency-Key``.
        callback_outcomes: callback deliveries by outcome (``delivered``, ``failed``).

    Jobs with a ``callbackUrl`` also get an asyncio timer that completes them after
    ``pages * per_page`` real seconds; it is cancelled on cancel/complete and by
    :meth:`close`. A job with a ``callbackUrl`` fires its callback exactly once, whichever way
    it completes (complete route, timer, or a read that finds its time has passed).
    """

    def __init__(
        self,
        per_page: timedelta = timedelta(seconds=1),
        now: Callable[[], datetime] | None = None,
        callback_client_factory: Callable[[], httpx.AsyncClient] | None = None,
        callback_token: str | None = None,
        *,
        callback_tries: int = 12,
        callback_backoff: timedelta = timedelta(milliseconds=200),
        callback_backoff_cap: timedelta = timedelta(seconds=10),
        callback_bases: tuple[str, ...] = (),
        state_file: Path | None = None,
        gate: RateGate | None = None,
    ) -> None:
        if per_page < timedelta(0):
            raise ValueError(f"per_page must be >= 0, got {per_page}")
        if callback_tries < 1:
            raise ValueError(f"callback_tries must be >= 1, got {callback_tries}")
        self.per_page = per_page
        self._now = now or _system_utc_now
        self._callback_client_factory = callback_client_factory or _default_callback_client
        self.callback_token = callback_token
        self.callback_tries = callback_tries
        self.callback_backoff = callback_backoff
        self.callback_backoff_cap = callback_backoff_cap
        self.calls: Counter[str] = Counter()
        self.callback_outcomes: Counter[str] = Counter()
        self._jobs: dict[str, _OcrJob] = {}
        self._by_key: dict[str, str] = {}  # Idempotency-Key -> the job its first upload made
        self.uploads_by_key: Counter[str] = Counter()  # upload calls per Idempotency-Key
        self.callback_bases = tuple(httpx.URL(b) for b in callback_bases)
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._callback_tasks: set[asyncio.Task[None]] = set()
        self._callback_client: httpx.AsyncClient | None = None
        self._closed = False
        self.state_file = state_file
        self.gate = gate or RateGate()
        if state_file is not None:
            self._replay(state_file)

    # -- clock -----------------------------------------------------------------------------

    def now(self) -> datetime:
        """Return the service clock's current instant (aware UTC)."""
        return ensure_utc(self._now())

    # -- operations (the routes call these) ------------------------------------------------

    def callback_allowed(self, url: str) -> bool:
        """Whether ``url`` lies under one of :attr:`callback_bases` (same scheme, host and
        port; path below the base's path)."""
        try:
            target = httpx.URL(url)
        except (httpx.InvalidURL, ValueError):
            return False
        for base in self.callback_bases:
            prefix = base.path.rstrip("/") + "/"
            if (
                (target.scheme, target.host, target.port) == (base.scheme, base.host, base.port)
                and target.path.startswith(prefix)
                and not target.userinfo
                and ".." not in target.path.split("/")
            ):
                return True
        return False

    def upload(
        self,
        document_id: str,
        pages: int,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        callback_token: str | None = None,
    ) -> OcrJobAccepted:
        """Create a pending job; a repeat of ``idempotency_key`` answers the first job.

        Args:
            document_id: caller's document id.
            pages: page count (>= 1).
            callback_url: URL to POST to on completion, or None.
            idempotency_key: the caller's key for this upload, or None.
            callback_token: the bearer token of this job's callback (default the
                service's ``callback_token``).

        Returns:
            The accepted job (status ``pending`` for a new one; a repeat's status now).

        Raises:
            OcrCallbackNotAllowed: ``callback_url`` is outside :attr:`callback_bases`.
            OSError: the :attr:`state_file` cannot be written (nothing is created).
        """
        if pages < 1:
            raise ValueError(f"pages must be >= 1, got {pages}")
        if idempotency_key is not None and idempotency_key in self._by_key:
            first = self._settled(self._by_key[idempotency_key])
            return OcrJobAccepted(
                job_id=first.job_id,
                document_id=first.document_id,
                status=first.status,
                pages=first.pages,
            )
        if callback_url is not None and not self.callback_allowed(callback_url):
            raise OcrCallbackNotAllowed(callback_url)
        uploaded_at = self.now()
        job = _OcrJob(
            job_id=uuid.uuid4().hex,
            document_id=document_id,
            pages=pages,
            callback_url=callback_url,
            uploaded_at=uploaded_at,
            due_at=uploaded_at + self.per_page * pages,
            callback_token=callback_token,
        )
        self._record(
            {
                "op": "upload",
                "jobId": job.job_id,
                "documentId": document_id,
                "pages": pages,
                "callbackUrl": callback_url,
                "uploadedAt": job.uploaded_at.isoformat(),
                "dueAt": job.due_at.isoformat(),
                "key": idempotency_key,
                "callbackToken": callback_token,
            }
        )
        self._jobs[job.job_id] = job
        if idempotency_key is not None:
            self._by_key[idempotency_key] = job.job_id
        if callback_url is not None:
            self._start_timer(job)
        return OcrJobAccepted(
            job_id=job.job_id, document_id=document_id, status="pending", pages=pages
        )

    def get(self, job_id: str) -> OcrJobView:
        """Return one job, completing it first if its time has passed.

        Raises:
            OcrJobNotFound: unknown ``job_id``.
        """
        job = self._settled(job_id)
        return job.view()

    def list_jobs(self) -> list[OcrJobSummary]:
        """Return every job (upload order), each settled against the clock first."""
        rows = []
        for job_id in list(self._jobs):
            job = self._settled(job_id)
            rows.append(
                OcrJobSummary(job_id=job.job_id, document_id=job.document_id, status=job.status)
            )
        return rows

    def cancel(self, job_id: str) -> OcrCancelResult:
        """Cancel a pending job (idempotent); a completed job stays completed.

        Raises:
            OcrJobNotFound: unknown ``job_id``.
        """
        job = self._settled(job_id)
        if job.status == "pending":
            job.status = "cancelled"
            job.finished_at = self.now()
            self._record({"op": "cancelled", "jobId": job_id, "at": job.finished_at.isoformat()})
            self._stop_timer(job.job_id)
        return OcrCancelResult(job_id=job.job_id, status=job.status)

    def complete(self, job_id: str) -> OcrJobView:
        """Complete a job now and schedule its callback (idempotent for completed jobs).

        Raises:
            OcrJobNotFound: unknown ``job_id``.
            OcrJobCancelled: the job was cancelled.
        """
        job = self._settled(job_id)
        if job.status == "cancelled":
            raise OcrJobCancelled(job_id)
        if job.status == "pending":
            self._mark_completed(job)
        return job.view()

    # -- lifecycle -------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait until every scheduled callback delivery has finished (delivered or given up).

        Callbacks scheduled while draining are awaited too. Timers are not awaited.
        """
        while self._callback_tasks:
            await asyncio.gather(*list(self._callback_tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel completion timers and any callback still in flight; schedule no more.

        Call :meth:`drain` first to let pending callbacks be delivered.
        """
        self._closed = True
        tasks = list(self._timers.values()) + list(self._callback_tasks)
        self._timers.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._callback_tasks.clear()
        if self._callback_client is not None:
            await self._callback_client.aclose()
            self._callback_client = None

    # -- persistence -----------------------------------------------------------------------

    def _record(self, entry: dict[str, Any]) -> None:
        """Append one change to :attr:`state_file` (one JSON line, handed to the operating
        system before the change is answered: a killed process keeps it)."""
        if self.state_file is None:
            return
        with self.state_file.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")

    def _replay(self, path: Path) -> None:
        """Rebuild the jobs from ``path`` (a missing file: none; a torn last line, from a
        kill mid-write, is ignored). Jobs that completed or were cancelled before count as
        called back already: no callback fires twice."""
        if not path.exists():
            return
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("op") == "upload":
                job = _OcrJob(
                    job_id=entry["jobId"],
                    document_id=entry["documentId"],
                    pages=entry["pages"],
                    callback_url=entry["callbackUrl"],
                    uploaded_at=datetime.fromisoformat(entry["uploadedAt"]),
                    due_at=datetime.fromisoformat(entry["dueAt"]),
                    callback_token=entry.get("callbackToken"),
                )
                self._jobs[job.job_id] = job
                if entry.get("key") is not None:
                    self._by_key[entry["key"]] = job.job_id
            elif entry.get("jobId") in self._jobs:
                job = self._jobs[entry["jobId"]]
                job.status = "completed" if entry["op"] == "completed" else "cancelled"
                job.finished_at = datetime.fromisoformat(entry["at"])
                job.callback_scheduled = True

    # -- internals -------------------------------------------------------------------------

    def _settled(self, job_id: str) -> _OcrJob:
        job = self._jobs.get(job_id)
        if job is None:
            raise OcrJobNotFound(job_id)
        if job.status == "pending" and self.now() >= job.due_at:
            self._mark_completed(job)
        return job

    def _mark_completed(self, job: _OcrJob) -> None:
        job.status = "completed"
        job.finished_at = self.now()
        # recorded however it completed: early (the complete route), time alone would not say
        # so; by the clock, a restarted service must know its callback fired already
        self._record({"op": "completed", "jobId": job.job_id, "at": job.finished_at.isoformat()})
        self._stop_timer(job.job_id)
        if job.callback_url is not None and not job.callback_scheduled:
            job.callback_scheduled = True
            token = job.callback_token or self.callback_token
            self._spawn(self._send_callback(job.job_id, job.callback_url, token), callback=True)

    def _start_timer(self, job: _OcrJob) -> None:
        delay = (job.due_at - job.uploaded_at).total_seconds()
        task = self._spawn(self._timer(job.job_id, delay), callback=False)
        if task is not None:
            self._timers[job.job_id] = task

    def _stop_timer(self, job_id: str) -> None:
        task = self._timers.pop(job_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _timer(self, job_id: str, delay_seconds: float) -> None:
        await asyncio.sleep(max(0.0, delay_seconds))
        self._timers.pop(job_id, None)
        job = self._jobs.get(job_id)
        if job is not None and job.status == "pending":
            self._mark_completed(job)

    def _spawn(
        self, coro: Coroutine[Any, Any, None], *, callback: bool
    ) -> asyncio.Task[None] | None:
        what = "callback" if callback else "timer"
        if self._closed:
            coro.close()
            logger.warning("fake OCR service is closed; not scheduling a %s", what)
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            logger.warning("no running event loop; not scheduling a %s", what)
            return None
        task = loop.create_task(coro)
        if callback:
            self._callback_tasks.add(task)
            task.add_done_callback(self._callback_tasks.discard)
        return task

    def _client(self) -> httpx.AsyncClient:
        """The one client of every callback (its connections are kept and reused)."""
        if self._callback_client is None:
            self._callback_client = self._callback_client_factory()
        return self._callback_client

    def callback_delay(self, try_number: int) -> timedelta:
        """The real-time wait after failed try ``try_number`` (1-based) of a callback.

        Returns:
            ``min(callback_backoff_cap, callback_backoff * 2 ** (try_number - 1))``, jittered
            to between half of it and all of it.
        """
        doubled: timedelta = self.callback_backoff * 2 ** (try_number - 1)
        full = min(self.callback_backoff_cap, doubled)
        return full * (0.5 + random.random() / 2)

    async def _send_callback(self, job_id: str, url: str, token: str | None) -> None:
        headers = {"Idempotency-Key": f"ocr-{job_id}"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        payload = {"jobId": job_id, "status": "completed"}
        for try_number in range(1, self.callback_tries + 1):
            retryable = True
            asked = 0.0  # a Retry-After the answer gave, in seconds
            try:
                response = await self._client().post(url, json=payload, headers=headers)
            except Exception as exc:  # a callback must never raise: log and maybe retry
                logger.warning(
                    "OCR callback for job %s to %s failed (try %d/%d): %r",
                    job_id,
                    url,
                    try_number,
                    self.callback_tries,
                    exc,
                )
            else:
                if response.is_success:
                    self.callback_outcomes["delivered"] += 1
                    logger.debug("OCR callback for job %s delivered to %s", job_id, url)
                    return
                retryable = response.status_code >= 500 or (
                    response.status_code in _RETRYABLE_STATUSES
                )
                asked = _retry_after(response)
                logger.warning(
                    "OCR callback for job %s to %s answered %d (try %d/%d)",
                    job_id,
                    url,
                    response.status_code,
                    try_number,
                    self.callback_tries,
                )
            if not retryable:
                break
            if try_number < self.callback_tries:
                wait = self.callback_delay(try_number).total_seconds()
                cap = self.callback_backoff_cap.total_seconds()
                await asyncio.sleep(max(wait, min(asked, cap)))
        self.callback_outcomes["failed"] += 1
        logger.error("OCR callback for job %s to %s given up", job_id, url)
