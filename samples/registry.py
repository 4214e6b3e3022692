"""The sample flows as a flows target: ``document.process`` and ``job.await``.

On a node that serves HTTP they come with their fake providers (the OCR under ``/fake/ocr``,
the job runner under ``/fake/jobs``), mounted on the node itself; a node serving only your
own flows has neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from flowpark.flows import Flow, SignedWebhook
from flowpark.redaction import register_secrets
from flowpark.runtime.loading import Deps
from flowpark.samples.document_processing import OCR_COMPLETED, OcrClient, build_document_flow
from flowpark.samples.job_polling import JobClient, build_job_flow
from flowpark.samples.settings import (
    SampleSettings,
    callback_credential,
    fakes_admin_token,
    instance_callback_check,
)

__all__ = ["SIGNED_SECRET", "flows", "sample_flows"]

#: The ``FLOWPARK_SIGNAL_SECRETS`` entry that makes ``ocr.completed`` a signed signal.
SIGNED_SECRET = "ocr"


def sample_flows(sample: SampleSettings | None = None) -> Callable[[Deps], list[Flow]]:
    """A flows source (``source(deps) -> flows``) for the samples with ``sample`` settings.

    Args:
        sample: the samples' settings (default: read from ``FLOWPARK_*``).

    Returns:
        A callable that, given the node's :class:`~flowpark.runtime.loading.Deps`, mounts the
        fake providers when the node serves HTTP (and closes them when it stops) and returns
        the two sample flows bound to ``deps.http``.
    """

    def source(deps: Deps) -> list[Flow]:
        settings = sample or SampleSettings()
        node = deps.settings
        if deps.serving:
            _mount_fakes(deps, settings)
        # with an "ocr" secret the provider signs its ocr.completed webhooks (Standard
        # Webhooks) instead of sending a bearer token; the fake OCR cannot sign, so it is
        # not asked to call back then
        signed = SIGNED_SECRET in node.signal_secrets
        key = callback_credential(node, settings).value
        register_secrets([key, fakes_admin_token(node, settings)])
        callbacks = settings.ocr_callbacks and not signed
        if callbacks and deps.serving:
            # a job's callback opens the signal routes of the instance that uploaded it
            deps.accept_for_instance(instance_callback_check(key))
        ocr = OcrClient(
            deps.http,
            settings.ocr_base_url or node.self_url,
            callback_base=node.callback_url if callbacks else None,
            callback_key=key,
            admin_token=fakes_admin_token(node, settings),
            timeout=timedelta(seconds=settings.sample_ocr_call_timeout_seconds),
        )
        jobs = JobClient(deps.http, settings.jobs_base_url or node.self_url)
        signal = replace(OCR_COMPLETED, verify=SignedWebhook(SIGNED_SECRET)) if signed else None
        return [
            build_document_flow(ocr, signal=signal or OCR_COMPLETED),
            build_job_flow(
                jobs, heartbeat_timeout=timedelta(seconds=settings.sample_job_heartbeat_seconds)
            ),
        ]

    source.__name__ = "samples"
    return source


def flows(deps: Deps) -> list[Flow]:
    """The samples with their settings from ``FLOWPARK_*`` (the ``samples`` target)."""
    return sample_flows()(deps)


def _mount_fakes(deps: Deps, settings: SampleSettings) -> None:
    from flowpark.samples.fakes import (
        FakeJobService,
        FakeOcrService,
        create_jobs_router,
        create_ocr_router,
    )
    from flowpark.samples.fakes.ratelimit import RateGate
    from flowpark.samples.settings import fakes_state_file

    # each job's callback carries the token its upload gave (one instance's only)
    ocr = FakeOcrService(
        per_page=timedelta(seconds=settings.sample_ocr_per_page),
        callback_bases=(deps.settings.callback_url,),
        state_file=fakes_state_file(deps.settings, settings, "ocr"),
        gate=RateGate(settings.ocr_rate_limit, settings.ocr_rate_burst),
    )
    jobs = FakeJobService(
        queued_for=timedelta(seconds=settings.job_queued_seconds),
        succeed_after=timedelta(seconds=settings.job_succeed_seconds),
        state_file=fakes_state_file(deps.settings, settings, "jobs"),
    )
    admin = fakes_admin_token(deps.settings, settings)
    deps.mount(create_ocr_router(ocr, admin), tags=["fake services"])
    deps.mount(create_jobs_router(jobs, admin), tags=["fake services"])

    async def close() -> None:
        await ocr.drain()
        await ocr.close()

    deps.on_close(close)
    deps.state["fake_ocr"] = ocr
    deps.state["fake_jobs"] = jobs
