"""``python -m bench.report RESULT.json...``: a Markdown table of bench results (the JSON
objects ``python -m bench ... --json`` prints), for BENCHMARKS.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

SKIP = {"scenario", "store", "n", "params", "details", "machine", "targets"}


def main(paths: list[str]) -> None:
    print("| scenario | store | n | figure | value | target |")
    print("|---|---|---|---|---|---|")
    for path in paths:
        result = json.loads(Path(path).read_text())
        targets = result.get("targets", {})
        for key, value in result.items():
            if key in SKIP:
                continue
            target = targets.get(key)
            mark = (
                ""
                if target is None
                else f"{'met' if target['met'] else '**missed**'}: {target['target']}"
            )
            shown = f"{value:,}" if isinstance(value, int | float) else str(value)
            print(
                f"| {result['scenario']} | {result['store']} | {result['n']:,} | {key} | "
                f"{shown} | {mark} |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
