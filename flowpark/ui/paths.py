"""Where the console lives, as the browser sees it.

The console's routes are ``/ui...`` in flowpark's own application. Served at a node's root
that is also the browser's path; mounted by a host application under a prefix
(:meth:`flowpark.embedding.Flowpark.include_in`, or uvicorn's ``--root-path`` behind a
proxy), the ASGI ``root_path`` goes in front: ``/flowpark/ui``. Every link, form, redirect,
static file, htmx call and the session cookie's path is written from :func:`ui_root`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

__all__ = ["inside", "ui_root"]


def ui_root(request: HTTPConnection) -> str:
    """The console's root path for ``request``.

    Args:
        request: a request (or connection) of flowpark's application.

    Returns:
        ``"/ui"`` after the ASGI ``root_path``: ``"/ui"`` when flowpark is served at the
        root, ``"/flowpark/ui"`` when a host mounts it under ``/flowpark``.
    """
    return f"{request.scope.get('root_path', '')}/ui"


def inside(root: str, value: str | None) -> bool:
    """Whether ``value`` is a path under ``root`` on this host, so a redirect to it stays in
    the console (``next=`` after sign-in, a review form's way back).

    Args:
        root: a console path such as ``/ui`` or ``/flowpark/ui/reviews``.
        value: what the browser sent.

    Returns:
        True for ``root`` itself, ``root/...`` and ``root?...``; False for anything with a
        scheme or a host (``https://x``, ``//x``), a backslash (which browsers read as
        ``/``), or another path (``/ui`` when the console is at ``/flowpark/ui``).
    """
    if not value or "\\" in value or value.startswith("//"):
        return False
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return False
    return value == root or value.startswith((f"{root}/", f"{root}?"))
