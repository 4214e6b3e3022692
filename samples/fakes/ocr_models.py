"""The fake OCR provider's wire models and errors (see :mod:`flowpark.samples.fakes.ocr`)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "MAX_PAGES",
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

MAX_PAGES = 10_000
"""Largest page count an upload may declare."""

OcrJobStatus = Literal["pending", "completed", "cancelled"]


def ocr_text(pages: int) -> str:
    """Return the text the fake "reads" from a document of ``pages`` pages.

    Args:
        pages: page count (>= 1).

    Returns:
        One line per page, ``field_<n>: value <n>`` for n = 1..pages, joined by ``\\n``.
    """
    return "\n".join(f"field_{n}: value {n}" for n in range(1, pages + 1))


class _CamelModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class OcrUploadRequest(_CamelModel):
    """Body of ``POST /fake/ocr/jobs``.

    Attributes:
        document_id: caller's document id (``documentId``).
        pages: page count, 1..10000; the job takes ``pages * per_page`` to complete.
        callback_url: absolute URL to POST to when the job completes (``callbackUrl``).
        callback_token: the bearer token that callback carries (``callbackToken``).
    """

    document_id: str = Field(min_length=1, max_length=512)
    pages: int = Field(ge=1, le=MAX_PAGES, strict=True)
    callback_url: str | None = Field(default=None, min_length=1, max_length=2048)
    callback_token: str | None = Field(default=None, min_length=1, max_length=200)


class OcrJobAccepted(_CamelModel):
    """Answer to an upload (201).

    Attributes:
        job_id: fresh uuid4 hex (``jobId``).
        document_id: as uploaded (``documentId``).
        status: always ``"pending"``.
        pages: as uploaded.
    """

    job_id: str
    document_id: str
    status: OcrJobStatus
    pages: int


class OcrJobView(_CamelModel):
    """Full view of one job (``GET /fake/ocr/jobs/{jobId}``).

    Attributes:
        job_id: the job's id (``jobId``).
        document_id: as uploaded (``documentId``).
        pages: as uploaded.
        status: ``pending``, ``completed`` or ``cancelled``.
        text: the OCR text once completed (see :func:`ocr_text`), else null.
    """

    job_id: str
    document_id: str
    pages: int
    status: OcrJobStatus
    text: str | None = None


class OcrJobSummary(_CamelModel):
    """One row of ``GET /fake/ocr/jobs``."""

    job_id: str
    document_id: str
    status: OcrJobStatus


class OcrCancelResult(_CamelModel):
    """Answer to a cancel: the job's status afterwards (``completed`` if it had finished)."""

    job_id: str
    status: OcrJobStatus


class OcrJobNotFound(LookupError):
    """No job has this id (HTTP 404, code ``ocr.job_not_found``)."""

    code = "ocr.job_not_found"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"OCR job {job_id!r} not found")
        self.job_id = job_id


class OcrCallbackNotAllowed(ValueError):
    """The ``callbackUrl`` is not under flowpark's own base URL (HTTP 422, code
    ``ocr.callback_not_allowed``): the callback's token would go elsewhere."""

    code = "ocr.callback_not_allowed"

    def __init__(self, url: str) -> None:
        super().__init__("callbackUrl is not under an allowed callback base")
        self.url = url


class OcrJobCancelled(RuntimeError):
    """The job was cancelled, so it cannot be completed (HTTP 409, code ``ocr.job_cancelled``)."""

    code = "ocr.job_cancelled"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"OCR job {job_id!r} was cancelled")
        self.job_id = job_id
