"""Sentence splitter rules (DESIGN §7.5)."""

import uuid

import numpy as np
import pytest

from envs.data.niah_generator import TASKS, needle_sentence
from envs.data.splitter import split_sentences


@pytest.mark.parametrize(
    "text, expected",
    [
        ("One. Two? Three! Four", ["One.", "Two?", "Three!", "Four"]),
        (
            "Mr. Smith met Dr. Who and Prof. X vs. Y etc. today.",
            ["Mr. Smith met Dr. Who and Prof. X vs. Y etc. today."],
        ),
        ("Use e.g. apples, i.e. fruit. Done.", ["Use e.g. apples, i.e. fruit.", "Done."]),
        ("J. R. R. Tolkien wrote it. Yes.", ["J. R. R. Tolkien wrote it.", "Yes."]),
        ("The U.S. Army marched. Then rest.", ["The U.S. Army marched.", "Then rest."]),
        (
            "Visit https://example.com/a.b?c=1&d=2.html now. Or www.test.org/x.y. End.",
            ["Visit https://example.com/a.b?c=1&d=2.html now.", "Or www.test.org/x.y.", "End."],
        ),
        (
            "Pi is 3.14159 and v2.0.1 runs on 192.168.0.1 today. Next.",
            ["Pi is 3.14159 and v2.0.1 runs on 192.168.0.1 today.", "Next."],
        ),
        ("Wait... what? Fine.", ["Wait... what?", "Fine."]),
        ('He said "Stop." She left.', ['He said "Stop."', "She left."]),
        ("line one\nline two. more\n\n  \nthree", ["line one", "line two.", "more", "three"]),
        ("  ", []),
        ("Acme Inc. and Foo Ltd. merged. Ok.", ["Acme Inc. and Foo Ltd. merged.", "Ok."]),
    ],
)
def test_rules(text, expected):
    assert split_sentences(text) == expected


def test_needles_are_single_pieces_and_values_never_split():
    rng = np.random.default_rng(0)
    for vt in ("numbers", "uuids"):
        for _ in range(50):
            value = str(uuid.UUID(bytes=rng.bytes(16), version=4)) if vt == "uuids" else str(rng.integers(10**6, 10**7))
            key = "calm-harbor" if rng.random() < 0.5 else str(uuid.UUID(bytes=rng.bytes(16), version=4))
            needle = needle_sentence(key, value, vt)
            text = f"The grass is green. {needle} The sky is blue."
            pieces = split_sentences(text)
            assert needle in pieces
            assert sum(value in p for p in pieces) == 1
    assert {t.value_type for t in TASKS.values()} == {"numbers", "uuids"}
