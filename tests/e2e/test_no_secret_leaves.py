"""No secret leaves: what ``flowpark db upgrade`` prints, what ``serve`` logs from start-up to
shutdown, and every error answer carry no configured password or token; a 503 of an
unavailable store names no host or port."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from flowpark.cli.main import EXIT_STORE
from flowpark.store.migrate import upgrade
from tests.support.eventually import eventually
from tests.support.server import flowpark_command, free_port, live_server
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow

PASSWORD = f"pw-{uuid.uuid4().hex}"
TOKEN = f"tok-{uuid.uuid4().hex}"
CONSOLE_SECRET = f"console-{uuid.uuid4().hex}"
SECRETS = (PASSWORD, TOKEN, CONSOLE_SECRET)
DOCUMENTS = "/api/v1/documents"


def _with_password(url: str, port: int | None = None) -> str:
    # the shared server trusts loopback: the password is accepted and ignored
    parsed = make_url(url).set(password=PASSWORD)
    if port is not None:
        parsed = parsed.set(port=port)
    return parsed.render_as_string(hide_password=False)


def _env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env.update(
        FLOWPARK_DATABASE_URL=database_url,
        FLOWPARK_API_TOKENS=f"ops:{TOKEN}:read+start+signal+operate",
        FLOWPARK_CONSOLE_SECRET=CONSOLE_SECRET,
        PYTHONUNBUFFERED="1",
    )
    return env


def _assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{where} shows a secret: {text[-3000:]}"


def test_db_upgrade_prints_the_url_without_its_password(pg_url: str, tmp_path: Path) -> None:
    url = _with_password(pg_url)
    done = subprocess.run(
        [*flowpark_command(), "db", "upgrade", "--url", url],
        env=_env(url),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    _assert_no_secret(output, "db upgrade")
    assert "database at head: postgresql" in output and ":***@" in output
    # refused: the one error line names the database without its password either
    unreachable = _with_password(pg_url, port=free_port())
    refused = subprocess.run(
        [*flowpark_command(), "db", "upgrade"],
        env=_env(unreachable),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == EXIT_STORE, refused.stderr
    _assert_no_secret(refused.stdout + refused.stderr, "db upgrade refused")


async def test_serve_logs_and_error_answers_carry_no_secret(pg_url: str, tmp_path: Path) -> None:
    upgrade(pg_url)
    url = _with_password(pg_url)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*flowpark_command(), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env={**_env(url), "FLOWPARK_SELF_URL": base},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    answers: list[str] = []
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:

            async def up() -> None:
                assert process.poll() is None, log_path.read_text()
                try:
                    assert (await http.get("/healthz")).status_code == 200
                except httpx.TransportError as exc:
                    raise AssertionError(f"not listening yet: {exc}") from exc

            await eventually(up, timeout=60, what="serve up")
            auth = {"Authorization": f"Bearer {TOKEN}"}
            tries = [
                await http.get("/api/v1/instances", headers={"Authorization": "Bearer nope"}),
                await http.get(f"/api/v1/instances/{uuid.uuid4()}", headers=auth),
                await http.post(
                    DOCUMENTS,
                    content=b'{"documentId": ',
                    headers={**auth, "Content-Type": "application/json", "Idempotency-Key": "k"},
                ),
                await http.post(
                    DOCUMENTS,
                    json={"documentId": "d", "pages": "many"},
                    headers={**auth, "Idempotency-Key": "k2"},
                ),
                await http.get("/nowhere", headers=auth),
            ]
            # a client that puts the token in the query string: the access log line of it
            # must not carry it
            tries.append(await http.get(f"/api/v1/nowhere?access_token={TOKEN}"))
            assert [r.status_code for r in tries] == [401, 404, 422, 422, 404, 404]
            answers = [f"{r.status_code} {dict(r.headers)} {r.text}" for r in tries]
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    output = log_path.read_text(errors="replace")
    assert "ready on" in output and "GET /api/v1/nowhere?access_token=***" in output, output
    _assert_no_secret(output, "serve's output")
    for answer in answers:
        _assert_no_secret(answer, "an error answer")


async def test_a_503_names_no_host_port_or_password(pg_url: str) -> None:
    upgrade(pg_url)
    target = make_url(pg_url)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
    url = _with_password(pg_url, port=proxy.port)
    with live_server(url, api_tokens=TOKEN) as server:
        async with httpx.AsyncClient(
            base_url=server.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        ) as http:
            missing = f"/api/v1/instances/{uuid.uuid4()}"
            assert (await http.get(missing)).status_code == 404  # through the proxy
            proxy.cut()
            answer = await http.get(missing)
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["code"] == "store_unavailable"
    assert answer.headers["content-type"].startswith("application/problem+json")
    text = answer.text
    for leak in (PASSWORD, str(proxy.port), "127.0.0.1", "localhost", target.username or "-"):
        assert leak not in text, text
