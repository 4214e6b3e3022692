"""The document.process sample (parked poll)."""

from flowpark.samples.document_processing.flow import (
    NOT_READ_IN_TIME,
    OCR_COMPLETED,
    OcrClient,
    Waits,
    build_document_flow,
)
from flowpark.samples.document_processing.models import (
    DocumentProcessed,
    DocumentResult,
    ExtractedFields,
    OcrCompleted,
    OcrJob,
    OcrStatus,
    ProcessDocument,
)

__all__ = [
    "NOT_READ_IN_TIME",
    "OCR_COMPLETED",
    "DocumentProcessed",
    "DocumentResult",
    "ExtractedFields",
    "OcrClient",
    "OcrCompleted",
    "OcrJob",
    "OcrStatus",
    "ProcessDocument",
    "Waits",
    "build_document_flow",
]
