"""The console's assets ship in the package, and no page loads anything from elsewhere."""

from __future__ import annotations

import re
import tomllib
from importlib.resources import files
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_htmx_and_the_styles_are_package_files() -> None:
    static = files("flowpark.ui") / "static"
    htmx = (static / "htmx.min.js").read_text()
    assert htmx.startswith("var htmx=function()")
    assert "Zero-Clause BSD" in (static / "htmx.LICENSE").read_text()
    assert (static / "console.css").read_text()
    assert (static / "console.js").read_text()


def test_the_wheel_takes_the_templates_and_static_files() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["flowpark.ui"]
    assert "templates/*.html" in patterns and "static/*" in patterns


def test_no_template_or_script_reaches_another_site() -> None:
    package = files("flowpark.ui")
    sources = [
        *(package / "templates").iterdir(),
        package / "static" / "console.js",
        package / "static" / "console.css",
    ]
    for source in sources:
        text = source.read_text()
        # the SVG namespace is a name, not a fetch
        found = set(re.findall(r"https?://[^\s\"')]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not found, (source.name, found)
