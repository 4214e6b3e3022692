"""The web console at ``/ui``: server-rendered pages over the operator read model.

Mounted by :func:`flowpark.runtime.app.create_app` unless ``FLOWPARK_CONSOLE_ENABLED=false``.
"""

from flowpark.ui.console import install_console
from flowpark.ui.pages import build_console_router

__all__ = ["build_console_router", "install_console"]
