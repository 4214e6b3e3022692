"""Registers the sample flows on a catalog."""

from __future__ import annotations

import httpx

from app.flows import Catalog
from app.settings import Settings
from samples.document_processing import OcrClient, build_document_flow

__all__ = ["register_samples"]


def register_samples(catalog: Catalog, http: httpx.AsyncClient, settings: Settings) -> None:
    """Register ``document.process`` (and the other samples) bound to ``http``."""
    ocr = OcrClient(http, settings.ocr_url,
                    callback_base=settings.callback_url if settings.ocr_callbacks else None)
    catalog.register(build_document_flow(ocr))


def flows() -> list:  # type: ignore[type-arg]
    """The sample flows with a placeholder client, for ``flowpark flows check``."""
    from app.settings import Settings

    settings = Settings()
    ocr = OcrClient(httpx.AsyncClient(), settings.ocr_url)
    return [build_document_flow(ocr)]
