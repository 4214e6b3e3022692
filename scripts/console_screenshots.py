"""Take the console screenshots in docs/images with the browser tests' own set-up.

Starts ``flowpark serve`` on a fresh SQLite file (samples, no sweep, a slow fake OCR), makes
real documents over HTTP (parked, overdue, completed, failed), wakes one document twice from
the console, and saves PNGs of the overview, that instance's page and the flow graph, taken
by Debian's Chromium driven by Playwright.

Usage (from the repository root, with the dev extra installed)::

    python scripts/console_screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from flowpark.store.migrate import upgrade  # noqa: E402
from tests.browser.conftest import CHROMIUM_ARGS, start_server  # noqa: E402
from tests.support.console_data import populate  # noqa: E402
from tests.support.server import TOKEN  # noqa: E402

SETTINGS = {
    "run_sweeper": "false",
    "timer_scan_interval": "0.5",
    "sample_ocr_per_page": "600",
    "ocr_callbacks": "false",
}


def _wake(page: Page) -> None:
    page.get_by_role("link", name="Wake now").click()
    page.get_by_test_id("confirm-wake").click()
    expect(page.get_by_role("status")).to_contain_text("Woken")


def main() -> None:
    """Parse the arguments and take the three screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        template = folder / "template.db"
        upgrade(f"sqlite:///{template}")
        with start_server(
            folder / "flowpark.db", folder / "server.log", template, **SETTINGS
        ) as server:
            docs = populate(server.base_url, TOKEN, parked=6)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=args.chromium, headless=True, args=list(CHROMIUM_ARGS)
                )
                page = browser.new_page(viewport={"width": 1360, "height": 900})
                page.goto(f"{server.base_url}/ui/sign-in")
                page.get_by_label("API token").fill(TOKEN)
                page.get_by_role("button", name="Sign in").click()
                expect(page.get_by_role("heading", name="Overview")).to_be_visible()

                page.goto(f"{server.base_url}/ui/instances/{docs.parked[0]}")
                _wake(page)
                _wake(page)
                page.wait_for_timeout(1200)  # let the countdowns tick once for the picture
                page.screenshot(path=str(args.out / "console-instance.png"), full_page=True)

                page.goto(f"{server.base_url}/ui")
                page.screenshot(path=str(args.out / "console-overview.png"), full_page=True)

                page.goto(f"{server.base_url}/ui/flows/document.process/1.0.0")
                graph = page.get_by_test_id("flow-graph")
                graph.screenshot(path=str(args.out / "console-flow-graph.png"))
                browser.close()
    for name in ("console-overview.png", "console-instance.png", "console-flow-graph.png"):
        print(args.out / name)


if __name__ == "__main__":
    main()
