"""Browser-test fixtures: Playwright driving Debian's Chromium against a real server process.

* ``chromium_executable``: ``/usr/bin/chromium`` (``FLOWPARK_TEST_CHROMIUM`` overrides it).
  When it is missing the test FAILS, never skips: ``.ci/run`` installs Debian's ``chromium``
  package; no browser is downloaded at run time.
* ``browser``: one headless Chromium per test module, launched through Playwright's
  ``executable_path`` with :data:`CHROMIUM_ARGS`; Playwright gives every launch a fresh
  user-data directory of its own (deleted when the browser closes).
* ``context`` / ``page``: a new browser context (no cookies, no storage) and a page for each
  test.
* ``server``: ``flowpark serve`` in a child process on a migrated SQLite file, once
  ``/healthz`` answers (module scope: a module's tests share its data).
  :func:`start_server` starts one with other settings.

The tests are plain (sync) functions using Playwright's sync API: it runs its own event loop
and refuses to run inside a running one, and a sync test has none (pytest-asyncio only runs
loops for ``async def`` tests). Mark every browser test ``@pytest.mark.slow``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

from tests.support.server import SubprocessServer, serve_subprocess

__all__ = ["CHROMIUM_ARGS", "start_server"]

#: Flags for a quiet, reproducible headless Chromium: no network of its own (updates,
#: sync, QUIC), no sandbox (CI runs as root), no GPU.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
SERVER_READY_SECONDS = 30.0
#: How long Playwright waits for a page, a selector or an ``expect`` (milliseconds).
PAGE_TIMEOUT_MS = 15_000


@pytest.fixture(scope="session")
def chromium_executable() -> Path:
    """The Chromium binary; the test fails (never skips) when it is not installed."""
    path = Path(os.environ.get("FLOWPARK_TEST_CHROMIUM", "/usr/bin/chromium"))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"no Chromium at {path}: install Debian's package (apt-get install -y chromium; "
            ".ci/run does) or set FLOWPARK_TEST_CHROMIUM",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    """Playwright's sync API, started for one test module (its loop stops with it)."""
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright: Playwright, chromium_executable: Path) -> Iterator[Browser]:
    """Headless Debian Chromium with :data:`CHROMIUM_ARGS` and a fresh user-data dir."""
    launched = playwright.chromium.launch(
        executable_path=str(chromium_executable), headless=True, args=list(CHROMIUM_ARGS)
    )
    try:
        yield launched
    finally:
        launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser context (its own cookies and storage) for one test."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-GB")
    ctx.set_default_timeout(PAGE_TIMEOUT_MS)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    """A page in the test's own context."""
    return context.new_page()


@contextmanager
def start_server(
    database: Path, log_path: Path, template: Path, **settings_env: str
) -> Iterator[SubprocessServer]:
    """``flowpark serve`` on a copy of the migrated ``template`` SQLite file at
    ``database``, yielded once ``/healthz`` answers 200.

    Args:
        database: where the SQLite file goes (a copy of ``template``).
        log_path: the child's output.
        template: a SQLite file migrated to head.
        **settings_env: ``FLOWPARK_<NAME>`` values by lower-case name.

    Raises:
        AssertionError: the server did not answer within :data:`SERVER_READY_SECONDS`
            (the message holds its output).
    """
    shutil.copyfile(template, database)
    with serve_subprocess(f"sqlite:///{database}", log_path, settings=settings_env) as server:
        server.wait_serving(SERVER_READY_SECONDS)
        yield server


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[SubprocessServer]:
    """A real ``flowpark serve`` process on a fresh migrated SQLite file (module scope)."""
    folder = tmp_path_factory.mktemp("browser-server")
    with start_server(folder / "flowpark.db", folder / "server.log", _sqlite_template) as srv:
        yield srv
