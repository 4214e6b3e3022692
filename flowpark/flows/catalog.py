"""The catalog: compiled plans keyed by (name, version)."""

from __future__ import annotations

import logging

from flowpark.errors import DefinitionError, FlowNotFound, shown
from flowpark.flows.builder import Flow
from flowpark.flows.plan import Plan
from flowpark.flows.providers import Provider
from flowpark.flows.rules import Finding, Severity, compile_flow, provider_clashes

__all__ = ["Catalog", "version_key"]

log = logging.getLogger("flowpark.catalog")


def version_key(version: str) -> tuple[int | str, ...]:
    """A sort key for versions: dot-separated parts, numeric ones compared as numbers
    (``1.10.0`` after ``1.9.0``)."""
    return tuple(int(p) if p.isdigit() else p for p in version.split("."))


class Catalog:
    """Registry of plans. A node may register several versions of one flow; instances
    always run on the version they started with."""

    def __init__(self) -> None:
        self._plans: dict[tuple[str, str], Plan] = {}

    def register(self, flow: Flow) -> list[Finding]:
        """Compile and register ``flow``; returns its warnings (also logged).

        Raises:
            DefinitionError: the flow breaks a rule (code ``definition_invalid``), or it
                declares a provider signal (``Signal(correlate=...)``) that a registered
                flow declares with another verifier (rule
                ``signal.correlate_verify_differs``: the provider's one URL has one), or a
                provider that a registered flow declares with other limits (rule
                ``provider.conflicting_declaration``).
            ValueError: the same name and version is already registered.
        """
        plan, findings = compile_flow(flow)
        if plan.key in self._plans:
            raise ValueError(f"flow {plan.name}@{plan.version} is already registered")
        self._check_provider_signals(plan)
        clashes = provider_clashes([*self._plans.values(), plan])
        if clashes:
            raise DefinitionError(
                f"flow {plan.name}@{plan.version} is invalid: " + "; ".join(map(str, clashes)),
                [*findings, *clashes],
                flow=plan.name,
                version=plan.version,
            )
        for finding in findings:
            log.warning("%s", finding)
        self._plans[plan.key] = plan
        return findings

    def _check_provider_signals(self, plan: Plan) -> None:
        """Refuse a provider signal that a registered plan declares with another verifier."""
        for signal in plan.signals.values():
            if signal.correlate is None:
                continue
            for other in self._plans.values():
                theirs = other.signals.get(signal.name)
                if (
                    theirs is None
                    or theirs.correlate is None
                    or theirs.correlate.provider != signal.correlate.provider
                    or theirs.verify == signal.verify
                ):
                    continue
                finding = Finding(
                    "signal.correlate_verify_differs",
                    Severity.ERROR,
                    plan.name,
                    f"signal {signal.name}",
                    f"provider signal {signal.correlate.provider}/{signal.name} is verified "
                    f"by {signal.verify!r} here and by {theirs.verify!r} in "
                    f"{other.name}@{other.version}: its one route takes one verifier",
                )
                raise DefinitionError(
                    f"flow {plan.name}@{plan.version} is invalid: {finding}",
                    [finding],
                    flow=plan.name,
                    version=plan.version,
                )

    def get(self, name: str, version: str) -> Plan:
        """The plan of ``name``@``version``. Raises FlowNotFound (``flow_not_found``)."""
        try:
            return self._plans[(name, version)]
        except KeyError:
            raise FlowNotFound(
                f"flow {shown(name)}@{shown(version)} is not registered on this node",
                flow=shown(name),
                version=shown(version),
            ) from None

    def find(self, name: str, version: str) -> Plan | None:
        """The plan of ``name`` at ``version``, or None when not registered."""
        return self._plans.get((name, version))

    def latest(self, name: str) -> Plan:
        """The highest registered version of ``name``. Raises FlowNotFound."""
        versions = [p for (n, _), p in self._plans.items() if n == name]
        if not versions:
            raise FlowNotFound(f"flow {shown(name)} is not registered", flow=shown(name))
        return max(versions, key=lambda p: version_key(p.version))

    def plans(self) -> list[Plan]:
        """Every registered plan."""
        return list(self._plans.values())

    def providers(self) -> list[Provider]:
        """Every provider the registered plans call, each once, sorted by name."""
        found: dict[str, Provider] = {}
        for plan in self._plans.values():
            for provider in plan.providers:
                found.setdefault(provider.name, provider)
        return [found[name] for name in sorted(found)]

    def runnable(self) -> list[tuple[str, str]]:
        """Every registered (name, version)."""
        return sorted(self._plans)
