"""flowpark for flow authors: everything a flows module imports.

Example::

    from flowpark import Backoff, Capability, Deps, Flow, HttpTrigger, StepContext

    def flows(deps: Deps) -> list[Flow]:
        return [Flow("build.await", "1.0.0", input=Build).step(StartBuild(deps.http))]

Serve a module, a ``.py`` file or a folder of them with ``flowpark serve --flows TARGET``
(or ``FLOWPARK_FLOWS``); test flows on a virtual clock with :mod:`flowpark.testing`.
"""

from app.errors import DefinitionError, FlowFailure, FlowsUnloadable
from app.flows import (
    Backoff,
    Bag,
    Block,
    Capability,
    CapabilityOptions,
    Complete,
    Decision,
    Fail,
    Finding,
    Flow,
    GitHubWebhook,
    HmacWebhook,
    HttpTrigger,
    Profile,
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
)
from app.runtime.loading import Deps

__all__ = [
    "Backoff",
    "Bag",
    "Block",
    "Capability",
    "CapabilityOptions",
    "Complete",
    "Decision",
    "DefinitionError",
    "Deps",
    "Fail",
    "Finding",
    "Flow",
    "FlowFailure",
    "FlowsUnloadable",
    "GitHubWebhook",
    "HmacWebhook",
    "HttpTrigger",
    "Profile",
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
]
