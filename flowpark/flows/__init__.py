"""Authoring API: flows, capabilities, schedules, signals, rules and the catalog."""

from flowpark.errors import FlowFailure
from flowpark.flows.builder import Block, Flow
from flowpark.flows.capability import (
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
from flowpark.flows.catalog import Catalog
from flowpark.flows.correlation import Correlate
from flowpark.flows.durations import Backoff, RetryPolicy, to_timedelta
from flowpark.flows.plan import HttpTrigger, Plan, Profile
from flowpark.flows.providers import Provider, ProviderPushback, retry_after_instant
from flowpark.flows.rules import Finding, Severity, check_flow, compile_flow
from flowpark.flows.webhooks import (
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
    "Correlate",
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
    "compile_flow",
    "retry_after_instant",
    "to_timedelta",
]
