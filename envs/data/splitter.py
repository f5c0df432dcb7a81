"""Rule-based sentence splitter (DESIGN §7.5, the rebuild's normative definition).

Rules:

* newlines are hard breaks;
* a sentence ends after ``.``, ``?`` or ``!`` (optionally followed by closing quotes or
  brackets) when whitespace or the end of the text follows;
* never inside a whitespace-free token, so URLs / web addresses, decimals, versions, IPs,
  uuids and 7-digit numbers stay whole (their inner dots are not followed by whitespace);
* never after a common abbreviation (Mr, Mrs, Ms, Dr, Prof, Sr, Jr, St, Inc, Ltd, Co, vs,
  etc, e.g, i.e), a single capital letter (initials: ``J. R. R. Tolkien``), a dotted
  initialism (``U.S.``) or an ellipsis (``...``); a dot that ends a web address and is
  followed by whitespace is a sentence end (the address itself is never cut);
* pieces are stripped and empty ones dropped.

The ref's exact abbreviation lists are unknown (DESIGN §7.5): this is the
rebuild's choice, kept deliberately small and predictable.
"""

from __future__ import annotations

import re

ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "inc", "ltd", "co", "vs", "etc", "e.g", "i.e"}
)
_CLOSERS = "\"')]}»”’"
# a candidate end: terminal punctuation, optional closers, then whitespace or end of line
_END = re.compile(r"[.?!]+[" + re.escape(_CLOSERS) + r"]*(?=\s|$)")
_INITIALISM = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")
_OPENERS = "\"'([{«“‘"


def _token_before(line: str, end: int) -> str:
    """The whitespace-delimited token ending at ``end`` (exclusive), leading openers stripped."""
    start = end
    while start > 0 and not line[start - 1].isspace():
        start -= 1
    return line[start:end].lstrip(_OPENERS)


def _is_boundary(line: str, match: re.Match[str]) -> bool:
    punct = match.group(0).rstrip(_CLOSERS)
    if "?" in punct or "!" in punct:
        return True  # '?', '!', '?!', ... always end a sentence
    if len(punct) > 1:
        return False  # ellipsis '...' (or '..'): not a sentence end
    word = _token_before(line, match.start())
    if not word:
        return True
    if word.lower() in ABBREVIATIONS:
        return False
    if len(word) == 1 and word.isupper():
        return False  # single capital letter: an initial
    if _INITIALISM.match(word):
        return False  # U.S. / e.g written without the abbreviation list
    return True


def split_line(line: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for m in _END.finditer(line):
        if _is_boundary(line, m):
            piece = line[start : m.end()].strip()
            if piece:
                pieces.append(piece)
            start = m.end()
    rest = line[start:].strip()
    if rest:
        pieces.append(rest)
    return pieces


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into stripped, non-empty sentences (see the module rules)."""
    out: list[str] = []
    for line in text.splitlines():
        out.extend(split_line(line))
    return out
