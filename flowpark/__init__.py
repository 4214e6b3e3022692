"""flowpark for flow authors: everything a flows module imports.

Example::

    from flowpark import Backoff, Capability, Deps, Flow, HttpTrigger, StepContext

    def flows(deps: Deps) -> list[Flow]:
        return [Flow("build.await", "1.0.0", input=Build).step(StartBuild(deps.http))]

Serve a module, a ``.py`` file or a folder of them with ``flowpark serve --flows TARGET``
(or ``FLOWPARK_FLOWS``); test flows on a virtual clock with :mod:`flowpark.testing`;
start and follow instances from a service with :class:`flowpark.Client` (or
``AsyncClient``, :mod:`flowpark.client`).
"""

from typing import TYPE_CHECKING, Any

from flowpark.errors import DefinitionError, FlowFailure, FlowsUnloadable
from flowpark.flows import (
    Backoff,
    Bag,
    Block,
    Capability,
    CapabilityOptions,
    Complete,
    Correlate,
    Decision,
    Fail,
    Finding,
    Flow,
    GitHubWebhook,
    HmacWebhook,
    HttpTrigger,
    Profile,
    Provider,
    ProviderPushback,
    RecoveryError,
    RetryPolicy,
    Severity,
    Signal,
    SignalMatch,
    SignedWebhook,
    StepContext,
    Stream,
    StripeWebhook,
    WebhookDelivery,
    bag_key,
    check_flow,
    retry_after_instant,
)
from flowpark.runtime.loading import Deps

if TYPE_CHECKING:  # loaded on first use: a flows module's import loads no HTTP client
    from flowpark.client import AsyncClient, Client
    from flowpark.embedding import Flowpark, LocalClient

__all__ = [
    "AsyncClient",
    "Backoff",
    "Bag",
    "Block",
    "Capability",
    "CapabilityOptions",
    "Client",
    "Complete",
    "Correlate",
    "Decision",
    "DefinitionError",
    "Deps",
    "Fail",
    "Finding",
    "Flow",
    "FlowFailure",
    "Flowpark",
    "FlowsUnloadable",
    "GitHubWebhook",
    "HmacWebhook",
    "HttpTrigger",
    "LocalClient",
    "Profile",
    "Provider",
    "ProviderPushback",
    "RecoveryError",
    "RetryPolicy",
    "Severity",
    "Signal",
    "SignalMatch",
    "SignedWebhook",
    "StepContext",
    "Stream",
    "StripeWebhook",
    "WebhookDelivery",
    "bag_key",
    "check_flow",
    "retry_after_instant",
]


def __getattr__(name: str) -> Any:
    """``Client`` and ``AsyncClient`` (:mod:`flowpark.client`), ``Flowpark`` and
    ``LocalClient`` (:mod:`flowpark.embedding`), imported on first use."""
    if name in ("AsyncClient", "Client"):
        from flowpark import client

        return getattr(client, name)
    if name in ("Flowpark", "LocalClient"):
        from flowpark import embedding

        return getattr(embedding, name)
    raise AttributeError(f"module 'flowpark' has no attribute {name!r}")
