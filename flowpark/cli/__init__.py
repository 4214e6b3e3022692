"""The operator's CLI: ``flowpark instances ...``, ``flowpark reviews ...``, ``flowpark nodes``,
``flowpark providers ...``, ``flowpark flows list|show`` (and ``flowpark flows simulate``,
which reads the flow definitions, not a node).

Every command talks to a running node over its HTTP API (``--url`` / ``FLOWPARK_URL``,
``--token`` / ``FLOWPARK_TOKEN``; with no token, a loopback URL is sent the local trial's
``dev-token``) through :class:`flowpark.client.Client`, never to the database. Tables for
people, ``--json`` for scripts (the API's JSON, unchanged). Errors go to stderr as
``error: <code>: <detail>``.

Exit codes (scripts may rely on them):

====  =====================================================================
0     done (``show --watch``: the instance completed)
1     the node answered another error (4xx/5xx), or ``--watch`` saw it fail or be cancelled
2     bad usage (an unknown option, a missing argument, an unreadable value)
3     the node cannot be reached (connection refused, timeout)
4     not found (``instance_not_found``, ``flow_not_found``, ``signal_not_declared``,
      ``review_not_found``)
5     conflict: the instance ended (``instance_ended``), is busy, or has no budget; the
      review is closed (``review_closed``) or claimed by another (``review_claimed``)
6     unauthorized or forbidden (no token, an unknown one, a missing scope)
====  =====================================================================
"""

from __future__ import annotations

import typer

from flowpark.cli._client import (
    EXIT_CONFLICT,
    EXIT_ERROR,
    EXIT_FORBIDDEN,
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
)
from flowpark.cli.flows import flows_list, flows_show
from flowpark.cli.instances import instances_app
from flowpark.cli.nodes import nodes_list
from flowpark.cli.providers import providers_app
from flowpark.cli.reviews import reviews_app
from flowpark.cli.simulate import flows_simulate

__all__ = [
    "EXIT_CONFLICT",
    "EXIT_ERROR",
    "EXIT_FORBIDDEN",
    "EXIT_NOT_FOUND",
    "EXIT_UNREACHABLE",
    "add_operator_commands",
    "instances_app",
    "providers_app",
]


def add_operator_commands(app: typer.Typer, flows_app: typer.Typer) -> None:
    """Mount ``instances``, ``reviews`` and ``nodes`` on ``app`` and ``list``/``show`` on the
    ``flows`` group."""
    app.add_typer(instances_app, name="instances")
    app.add_typer(reviews_app, name="reviews")
    app.command("nodes")(nodes_list)
    app.add_typer(providers_app, name="providers")
    flows_app.command("list")(flows_list)
    flows_app.command("show")(flows_show)
    flows_app.command("simulate")(flows_simulate)
