"""Values of the document.process flow (JSON in camelCase)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "DocumentProcessed",
    "DocumentResult",
    "ExtractedFields",
    "OcrCompleted",
    "OcrJob",
    "OcrStatus",
    "ProcessDocument",
]


#: An id a sample accepts: no control character (C0, DEL or C1), so it reads the same in
#: every log line, URL and store.
PRINTABLE_ID = r"^[^\x00-\x1f\x7f-\x9f]+$"


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def _json_number(value: Any) -> Any:
    """A JSON number (``3``, or ``3.0``), never a string or a boolean."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON integer")
    return value


class ProcessDocument(_Camel):
    """Input: a document to read. ``pages`` bounds the fake OCR's work (1..10,000)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"documentId": "invoice-42", "pages": 3}]}
    )

    document_id: str = Field(min_length=1, max_length=200, pattern=PRINTABLE_ID)
    content_type: str = Field(default="application/pdf", max_length=200)
    pages: Annotated[int, BeforeValidator(_json_number)] = Field(ge=1, le=10_000)


class OcrJob(_Camel):
    """Put by ``ocr.upload``: the provider's job id."""

    job_id: str


class OcrStatus(_Camel):
    """Put by ``ocr.status``: the provider's answer to one status check."""

    job_id: str
    status: str
    text: str | None = None

    @property
    def is_terminal(self) -> bool:
        """Whether the job has finished (completed or failed)."""
        return self.status in ("completed", "cancelled", "failed")


class ExtractedFields(_Camel):
    """Put by ``document.extract``: fields read off the OCR text."""

    values: dict[str, str]


class DocumentProcessed(_Camel):
    """The ``document.processed`` event."""

    document_id: str
    field_count: int


class DocumentResult(_Camel):
    """The flow's result."""

    document_id: str
    field_count: int


class OcrCompleted(BaseModel):
    """Payload of the ``ocr.completed`` signal (the provider's webhook)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        json_schema_extra={"examples": [{"jobId": "job-17", "status": "completed"}]},
    )

    job_id: str = Field(min_length=1, max_length=200, pattern=PRINTABLE_ID)
    status: str | None = None
