"""experiments/qa3_32k/round10.py's layout and pick helpers on a hand-made qa3 haystack (the archive
readers and tables run in `python experiments/qa3_32k/analyze.py`, not here: they rebuild 32K haystacks)."""

from __future__ import annotations

import numpy as np
import pytest

from envs.positions import relative_codes_by_gap
from tests.conftest import load_script

R = load_script("round10", "experiments/qa3_32k")
A = R.A

NOISE = "It was a dark and stormy night."
# 0 an earlier object fact, 2 another, 4 the gold obj (the last fact naming the apple), 5 an earlier
# move of John in prev's gap, 6 prev, 7 Y; the rest is noise.
CHUNKS = [
    "John got the apple.",
    NOISE,
    "John dropped the apple.",
    NOISE,
    "John took the apple.",
    "John went to the office.",
    "John went to the kitchen.",
    "John travelled to the garden.",
    NOISE,
    NOISE,
]
FACTS = [0, 2, 4, 5, 6, 7]


@pytest.fixture(scope="module")
def hay() -> dict:
    sample = {
        "chunks": CHUNKS,
        "facts_idx": FACTS,
        "sf_idx": [4, 6, 7],
        "num_sentences": len(CHUNKS),
        "question": "Where was the apple before the garden? ",
    }
    return A.compact(sample)


def test_roles_and_last_object_fact(hay):
    assert hay["roles"] == {"obj": 4, "prev": 6, "Y": 7}
    R.check_last_object_fact(hay)  # passes: 4 is the last fact naming the apple


@pytest.mark.parametrize("delta", [20, 100, 200])
def test_gap_fraction_is_what_the_code_floors(delta):
    rng = np.random.default_rng(0)
    ell = int(0.9 * delta)
    for _ in range(50):
        n = int(rng.integers(2, 400))
        selected = sorted(rng.choice(n, size=int(rng.integers(0, 4)), replace=False).tolist())
        codes = relative_codes_by_gap(n, selected, delta)
        for i in rng.choice(n, size=min(n, 20), replace=False):
            j, f = R.gap_fraction(n, selected, int(i))
            assert codes[i] == delta * j + int(np.floor(ell * f + 1e-9))


def test_layout(hay):
    lay = R.layout(hay)
    # obj, state ∅: one gap of 10 chunks; the closest earlier object fact is chunk 2
    assert lay["delta_obj"] == pytest.approx((4 - 2) / 9)
    assert lay["end_obj"] == pytest.approx(1 - 4 / 9)
    # prev, state {4, 7}: gap [4, 7) of 3 chunks; chunk 5 (John) at 1/2, prev at 2/2
    assert lay["delta_prev"] == pytest.approx(0.5)
    assert lay["end_prev"] == pytest.approx(0.0)


def test_layout_without_an_earlier_rival(hay):
    lonely = dict(hay, comp=dict(hay["comp"], prev=[c for c in hay["comp"]["prev"] if c != 5]))
    assert R.layout(lonely)["delta_prev"] == R.NO_RIVAL  # chunks 0 and 2 lie in another gap


def test_first_error(hay):
    perfect = {"pred_idx": [4, 7, 6, 0, 1, 2], "sf_idx": hay["sf_idx"]}
    assert R.first_error(perfect, hay, 20) is None
    # δ 20, ℓ 18, state ∅: code(i) = 2i, so chunk 2 sits 4 codes below the obj gold (chunk 4)
    early = {"pred_idx": [2, 4, 7, 6, 0, 1], "sf_idx": hay["sf_idx"]}
    assert R.first_error(early, hay, 20) == {"step": 0, "earlier": True, "kind": "2-4"}
    noise = {"pred_idx": [4, 7, 8, 6, 0, 1], "sf_idx": hay["sf_idx"]}
    assert R.first_error(noise, hay, 20) == {"step": 2, "earlier": None, "kind": "noise"}


def test_pick_wrong(hay):
    sf = hay["sf_idx"]
    assert R.pick_wrong({"pred_idx": [2, 4, 7, 6], "sf_idx": sf}, hay, "obj") is True
    assert R.pick_wrong({"pred_idx": [7, 4, 6, 2], "sf_idx": sf}, hay, "obj") is False  # Y first: no error
    assert R.pick_wrong({"pred_idx": [4, 7, 5, 6], "sf_idx": sf}, hay, "prev") is True
    assert R.pick_wrong({"pred_idx": [7, 4, 6, 5], "sf_idx": sf}, hay, "prev") is False
    assert R.pick_wrong({"pred_idx": [2, 4, 7, 6], "sf_idx": sf}, hay, "prev") is None  # never in {obj, Y}


def test_logistic_recovers_its_weights():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20000, 2))
    p = 1 / (1 + np.exp(-(-1.0 + 2.0 * x[:, 0] - 0.5 * x[:, 1])))
    w = R.logistic(x, (rng.random(len(p)) < p).astype(float))
    assert w == pytest.approx([-1.0, 2.0, -0.5], abs=0.1)


def test_bins():
    assert [R.bin_label(R.DELTA_BINS, k) for k in (0, 5)] == ["[0.0, 0.01)", "≥ 0.2"]
    assert R.bin_label(R.END_BINS, len(R.END_BINS) - 2) == "[0.2, 1]"
    assert R.in_bins(R.NO_RIVAL, R.DELTA_BINS) == len(R.DELTA_BINS) - 2
