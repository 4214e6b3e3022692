"""flowpark's OpenAPI operations inside a host application's document.

A host that includes flowpark (:meth:`flowpark.embedding.Flowpark.include_in`) serves one
``/openapi.json`` and one ``/docs``: its own operations as they were, and flowpark's under
the prefix, each tagged ``flowpark: <resource>`` (``flowpark: instances``, ...). Nothing of
the host's document is changed: a schema, security scheme or operation id of flowpark's
whose name the host already uses (with another meaning) is renamed
(``FlowparkInstanceView``, ``flowpark_get_instance``), and every reference to it follows.
"""

from __future__ import annotations

import copy
import json
from typing import Any

__all__ = ["TAG_PREFIX", "merge_openapi"]

#: Every flowpark operation's tags start with this in the host's document.
TAG_PREFIX = "flowpark: "
_METHODS = frozenset({"get", "put", "post", "delete", "patch", "head", "options", "trace"})


def _renamed(host: dict[str, Any], ours: dict[str, Any], new: str) -> dict[str, str]:
    """Our names that the host holds with another value, each with its new name."""
    return {
        name: new.format(name=name)
        for name, value in ours.items()
        if name in host and host[name] != value
    }


def merge_openapi(host: dict[str, Any], ours: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Add flowpark's paths, components and tags to the host's OpenAPI document.

    Args:
        host: the host's document (changed in place and returned).
        ours: flowpark's document (``flowpark``'s application's ``openapi()``; not changed).
        prefix: the path flowpark is included under, e.g. ``/flowpark``.

    Returns:
        ``host``, with flowpark's operations under ``prefix``.
    """
    ours = copy.deepcopy(ours)
    host_components = host.setdefault("components", {})
    our_components = ours.get("components", {})
    renames: dict[str, dict[str, str]] = {}
    for kind in ("schemas", "securitySchemes", "responses", "parameters", "headers"):
        renames[kind] = _renamed(
            host_components.get(kind, {}), our_components.get(kind, {}), "Flowpark{name}"
        )
    host_ops = {
        op.get("operationId")
        for item in host.get("paths", {}).values()
        for method, op in item.items()
        if method in _METHODS and isinstance(op, dict)
    }
    op_renames = {
        op["operationId"]: f"flowpark_{op['operationId']}"
        for item in ours.get("paths", {}).values()
        for method, op in item.items()
        if method in _METHODS and isinstance(op, dict) and op.get("operationId") in host_ops
    }
    text = json.dumps(ours)
    for kind, names in renames.items():
        for old, new in names.items():
            text = text.replace(f'"#/components/{kind}/{old}"', f'"#/components/{kind}/{new}"')
    for old, new in op_renames.items():
        text = text.replace(f'"operationId": "{old}"', f'"operationId": "{new}"')
    ours = json.loads(text)
    for kind, values in ours.get("components", {}).items():
        target = host_components.setdefault(kind, {})
        names = renames.get(kind, {})
        for name, value in values.items():
            target[names.get(name, name)] = value
    schemes = renames["securitySchemes"]
    paths = host.setdefault("paths", {})
    for path, item in ours.get("paths", {}).items():
        for method, op in item.items():
            if method not in _METHODS or not isinstance(op, dict):
                continue
            op["tags"] = [TAG_PREFIX + t for t in op.get("tags") or ["api"]]
            if "security" in op:
                op["security"] = [
                    {schemes.get(k, k): v for k, v in requirement.items()}
                    for requirement in op["security"]
                ]
        paths[f"{prefix}{path}"] = item
    seen = {t.get("name") for t in host.get("tags", [])}
    for tag in ours.get("tags", []):
        named = {**tag, "name": TAG_PREFIX + tag["name"]}
        if named["name"] not in seen:
            host.setdefault("tags", []).append(named)
    return host
