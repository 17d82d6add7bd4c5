"""Video ids, and the names they come from, as valid Unicode text in one spelling.

Any name is data: a file name need not be UTF-8 (Python holds each byte that is not as a
lone surrogate, U+DC80..U+DCFF, its "surrogateescape"), and a JSON manifest may hold a
lone surrogate (`"\\ud800"`). Neither can be hashed, stored in an example or written to
a JSON file as UTF-8, so every such name is spelled out here, one documented way, before
it goes anywhere; and two spellings of one text (NFC and NFD `café`) are one id, so one
video cannot land in two splits. The rules are in docs/guarantees.md, "Names and ids".
"""
from __future__ import annotations

import re
import unicodedata

_SURROGATE = re.compile("[\ud800-\udfff]")


def _spelled(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` as valid Unicode: a byte of a file name that is not UTF-8 becomes `\\xe9`
    (the four characters), any other lone surrogate `\\ud800`; all else is kept."""
    return _SURROGATE.sub(_spelled, text)


def is_text(text: str) -> bool:
    """Whether `text` is valid Unicode (no lone surrogate): it can be written as UTF-8."""
    return _SURROGATE.search(text) is None


def video_id(name: str) -> str:
    """The id of a video named `name` (a file's relative path, or a manifest's or a
    record's id), as it is hashed into its split and its windows' keys, compared for
    duplicates and stored: `printable`, in Unicode normal form NFC."""
    return unicodedata.normalize("NFC", printable(name))
