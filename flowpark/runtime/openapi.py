"""The committed OpenAPI contract: ``python -m flowpark.runtime.openapi > docs/openapi.json``.

The document is the one a node with the sample flows and default settings serves at
``/openapi.json``; it lives in the runtime because it needs the whole wired app, which the
API layer must not import.
"""

from __future__ import annotations

import json
from typing import Any

from flowpark.runtime.app import create_app
from flowpark.settings import Settings

__all__ = ["document"]


def document() -> dict[str, Any]:
    """The OpenAPI document of the app with the sample flows and default settings.

    Returns:
        The document as served at ``/openapi.json``.
    """
    return create_app(Settings()).openapi()


if __name__ == "__main__":
    print(json.dumps(document(), indent=2, ensure_ascii=False))
