"""The request-line and header check (flowpark.api.hygiene.unreadable) refuses exactly the
characters whose Unicode category is a control character or a surrogate: its scan of an
ASCII value agrees with the category of every character, for every ASCII byte in every
position, in a header value (where a tab is allowed) and elsewhere."""

from __future__ import annotations

import unicodedata

import pytest

from flowpark.api.hygiene import unreadable


def by_category(raw: bytes, *, header: bool) -> str | None:
    """The rule as the module docstring states it, one character at a time."""
    for ch in raw.decode("utf-8"):
        if header and ch == "\t":
            continue
        if unicodedata.category(ch) in ("Cc", "Cs"):
            return f"holds U+{ord(ch):04X} (a control character)"
    return None


@pytest.mark.parametrize("header", [False, True])
@pytest.mark.parametrize("around", [(b"", b""), (b"Bearer x", b"y"), (b"a\tb", b"")])
def test_every_ascii_byte_is_judged_by_its_category(
    header: bool, around: tuple[bytes, bytes]
) -> None:
    before, after = around
    for byte in range(128):
        raw = before + bytes([byte]) + after
        assert unreadable(raw, header=header) == by_category(raw, header=header), raw


def test_the_first_refused_character_is_named() -> None:
    assert unreadable(b"ok\x7f\x01") == "holds U+007F (a control character)"
    assert unreadable(b"a\tb") == "holds U+0009 (a control character)"
    assert unreadable(b"a\tb", header=True) is None
    assert unreadable("caf\u00e9\u0085".encode()) == "holds U+0085 (a control character)"
