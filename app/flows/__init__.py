"""Authoring API: flows, capabilities, schedules, signals, rules and the catalog."""

from app.errors import FlowFailure
from app.flows.builder import Block, Flow
from app.flows.capability import (
    Bag,
    Capability,
    CapabilityOptions,
    Complete,
    Decision,
    Fail,
    RecoveryError,
    Signal,
    SignalMatch,
    StepContext,
    Stream,
    bag_key,
)
from app.flows.catalog import Catalog
from app.flows.durations import Backoff, RetryPolicy, to_timedelta
from app.flows.plan import HttpTrigger, Plan, Profile
from app.flows.rules import Finding, Severity, check_flow, compile_flow
from app.flows.webhooks import (
    GitHubWebhook,
    HmacWebhook,
    SignedWebhook,
    StripeWebhook,
    WebhookDelivery,
)

__all__ = [
    "Backoff",
    "Bag",
    "Block",
    "Capability",
    "CapabilityOptions",
    "Catalog",
    "Complete",
    "Decision",
    "Fail",
    "Finding",
    "Flow",
    "FlowFailure",
    "GitHubWebhook",
    "HmacWebhook",
    "HttpTrigger",
    "Plan",
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
    "compile_flow",
    "to_timedelta",
]
