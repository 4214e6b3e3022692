"""The ASGI application of this repository, built from ``FLOWPARK_*`` settings.

Run from the repository root::

    flowpark db upgrade && uvicorn app.main:app --host 127.0.0.1 --port 8000

It serves ``FLOWPARK_FLOWS`` (the bundled sample flows unless set). ``flowpark serve`` runs
the same application with the node's logging, protocol limits and several workers.
"""

from flowpark.runtime.app import create_app

app = create_app()
