"""The rule for the free text a request stores (a review's note, an instance key) is one
rule: the check the API makes and the ``pattern`` the OpenAPI document states come from one
list of control characters, and every such field of the committed document states it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from flowpark.api.hygiene import LINES, control_in, controls_pattern
from flowpark.api.reviews import ReviewNote

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0)]


@pytest.mark.parametrize("allowed", ["", LINES], ids=["line", "note"])
def test_the_pattern_and_the_check_refuse_the_same_characters(allowed: str) -> None:
    pattern = re.compile(controls_pattern(allowed))
    for code in [*range(0x0000, 0x3000), 0xFEFF, 0x1F600]:
        ch = chr(code)
        refused = code in CONTROLS and ch not in allowed
        assert (control_in(f"a{ch}b", allowed) is not None) is refused, hex(code)
        assert (pattern.fullmatch(f"a{ch}b") is None) is refused, hex(code)


def test_a_note_model_refuses_controls_but_keeps_tabs_and_line_feeds() -> None:
    assert ReviewNote(note="line one\n\tline two").note == "line one\n\tline two"
    for note in ("\x1b]0;title\x07", "\x9b2J", "\x7f", "a\r\nb", "\x00"):
        with pytest.raises(ValidationError, match="control character"):
            ReviewNote(note=note)


def _properties(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every ``(name, schema)`` of an object property anywhere in ``document``."""
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, schema in (node.get("properties") or {}).items():
                found.append((name, schema))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    return found


def _string_pattern(schema: dict[str, Any]) -> str | None:
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "string":
            pattern = branch.get("pattern")
            return None if pattern is None else str(pattern)
    return None


def test_every_stored_text_field_of_the_document_states_the_rule() -> None:
    document = json.loads(DOCUMENT.read_text())
    properties = _properties(document)
    notes = [s for name, s in properties if name == "note" and "maxLength" in str(s)]
    keys = [s for name, s in properties if name == "instanceKey" and "minLength" in s]
    assert notes and keys
    assert {_string_pattern(s) for s in notes} == {controls_pattern(LINES)}
    assert {_string_pattern(s) for s in keys} == {controls_pattern()}
    assert controls_pattern(LINES) == "^[^\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f]*$"
