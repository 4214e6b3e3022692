"""The catalog: compiled plans keyed by (name, version)."""

from __future__ import annotations

import logging

from flowpark.errors import DefinitionError, FlowNotFound, shown
from flowpark.flows.builder import Flow
from flowpark.flows.plan import Plan
from flowpark.flows.providers import Provider
from flowpark.flows.rules import Finding, compile_flow, provider_clashes

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
            DefinitionError: the flow breaks a rule (code ``definition_invalid``), or
                declares a provider that a registered flow declares with other limits
                (rule ``provider.conflicting_declaration``).
            ValueError: the same name and version is already registered.
        """
        plan, findings = compile_flow(flow)
        if plan.key in self._plans:
            raise ValueError(f"flow {plan.name}@{plan.version} is already registered")
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
