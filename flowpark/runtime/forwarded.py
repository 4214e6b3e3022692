"""Which proxies' forwarded headers a node trusts (``FLOWPARK_FORWARDED_ALLOW_IPS``).

``X-Forwarded-For`` and ``X-Forwarded-Proto`` change what the node takes for the client's
address (the access log, ``/metrics``' loopback check, the sample fakes' admin routes) and
scheme (the console cookie's ``Secure`` flag): they are read only from the proxies named
there, or, when it is unset, from those uvicorn's own ``FORWARDED_ALLOW_IPS`` names; with
neither set, from none (uvicorn alone would trust loopback clients' headers).
"""

from __future__ import annotations

import os
from typing import Any

from flowpark.settings import Settings

__all__ = ["forwarded_options"]


def forwarded_options(settings: Settings) -> dict[str, Any]:
    """The ``uvicorn.Config`` arguments for the proxies ``settings`` trusts.

    Args:
        settings: the node's settings (``forwarded_allow_ips``).

    Returns:
        ``{"proxy_headers": bool, "forwarded_allow_ips": str | None}``.
    """
    allowed = settings.forwarded_allow_ips
    if allowed is None:
        allowed = os.environ.get("FORWARDED_ALLOW_IPS")
    if allowed is None or not allowed.strip():
        return {"proxy_headers": False, "forwarded_allow_ips": None}
    return {"proxy_headers": True, "forwarded_allow_ips": allowed.strip()}
