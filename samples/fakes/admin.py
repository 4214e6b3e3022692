"""Who may use the fakes' admin routes (list every job, complete, cancel, fail one): a
client on a loopback address, or one sending ``Authorization: Bearer <admin token>``
(:func:`flowpark.samples.settings.fakes_admin_token`: derived from the node's API tokens, so every
node and the ``flowpark fakes`` process sharing them know it, and no caller without them).
Anyone else gets 403 ``{"code": "fake.admin_only"}``: the routes that create a job and read
one job by its id stay open, as a provider's public API would.
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import Request
from fastapi.responses import JSONResponse

__all__ = ["ADMIN_ONLY", "admin_refusal"]

#: The code of a refused admin request.
ADMIN_ONLY = "fake.admin_only"


def _loopback(host: str | None) -> bool:
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def admin_refusal(request: Request, token: str | None) -> JSONResponse | None:
    """The 403 answer to an admin request from off-host without ``token``, else None.

    Args:
        request: the admin route's request.
        token: the admin bearer token, or None (loopback clients only).

    Returns:
        ``403 {"code": "fake.admin_only"}``, or None when the request may go on.
    """
    if _loopback(request.client.host if request.client else None):
        return None
    scheme, _, sent = request.headers.get("authorization", "").partition(" ")
    if (
        token is not None
        and scheme.lower() == "bearer"
        and hmac.compare_digest(sent.strip().encode("latin-1", "replace"), token.encode())
    ):
        return None
    return JSONResponse(status_code=403, content={"code": ADMIN_ONLY})
