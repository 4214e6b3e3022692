"""A node whose connections land on a read-only PostgreSQL (a standby, or a primary being
demoted): writes answer 503 ``store_unavailable`` with ``Retry-After``, never 500, and log
no traceback; once the server takes writes again, the node's dropped connections are made
anew and the same request succeeds.

The database of the test is made read-only for new sessions (``ALTER DATABASE ... SET
default_transaction_read_only``): every write a session attempts is refused with SQLSTATE
25006, as on a hot standby.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from flowpark.store.db import sync_url
from tests.conftest import pg_admin_url
from tests.support.api import DOCUMENTS
from tests.support.eventually import eventually
from tests.support.server import live_server

pytestmark = pytest.mark.postgres


def _read_only(url: str, on: bool) -> None:
    name = make_url(url).database
    admin = create_engine(sync_url(pg_admin_url()), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if on:
                conn.execute(
                    text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
                )
            else:
                conn.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
    finally:
        admin.dispose()


@pytest.fixture
def standby_url(store_url: str) -> Iterator[str]:
    """A migrated PostgreSQL database whose new sessions are read-only."""
    _read_only(store_url, True)
    yield store_url


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_writes_on_a_read_only_server_answer_503_then_succeed_once_it_takes_writes(
    standby_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    body = {"documentId": "on-a-standby", "pages": 1}
    headers = {"Idempotency-Key": "on-a-standby"}
    with live_server(standby_url) as server:
        async with server.client() as http:
            refused = [await http.post(DOCUMENTS, json=body, headers=headers) for _ in range(5)]
            assert [r.status_code for r in refused] == [503] * 5, [r.text for r in refused]
            for answer in refused:
                assert answer.json()["code"] == "store_unavailable"
                assert answer.headers["retry-after"] == "1"

            _read_only(standby_url, False)  # the promoted server: new sessions may write

            async def started() -> httpx.Response:
                answer = await http.post(DOCUMENTS, json=body, headers=headers)
                assert answer.status_code == 202, answer.text
                return answer

            # a connection opened before the switch is refused once more, then dropped
            await eventually(started, timeout=10, interval=0.2, what="a start on the primary")

    records = [r for r in caplog.records if r.name.startswith(("flowpark", "uvicorn"))]
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records if r.exc_info]
    assert not [r for r in records if r.levelno >= logging.ERROR], [r.getMessage() for r in records]
    outage_lines = [r.getMessage() for r in records if "store unavailable (api)" in r.getMessage()]
    assert outage_lines and len(outage_lines) <= 2, outage_lines
    assert "read-only transaction" in outage_lines[0]
