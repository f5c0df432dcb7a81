"""Position codes (envs/positions.py): the definition against hand-computed values and the
reference's float path, the fast path against the definition, and Episode.codes' choice."""

import itertools

import numpy as np
import pytest
import torch

from envs.env import HOST_CODES_MAX_CHUNKS, Episode, PositionSettings
from envs.positions import random_codes, relative_codes, relative_codes_by_gap


def float_reference(n_chunks, selected, step_size, formula="linspace"):
    """The reference's float path: per gap a float64 linspace + offset, cast to float32, truncated."""
    ell = int(0.9 * step_size)
    sel = sorted(selected)
    bounds = [0] + sel + [n_chunks]
    out = np.zeros(n_chunks, dtype=np.int64)
    for j in range(len(bounds) - 1):
        a, b = bounds[j], bounds[j + 1]
        n = b - a
        if n <= 0:
            continue
        if formula == "linspace":
            pos = np.linspace(0, ell, n, dtype=np.float64) + step_size * j
        else:
            pos = np.arange(n, dtype=np.float64) * (ell / n) + step_size * j
        out[a:b] = pos.astype(np.float32).astype(np.int64)
    return out


def hand(n, sel, delta=20):
    return relative_codes_by_gap(n, sel, delta).tolist()


def mask_of(n, sel):
    mask = torch.zeros(n, dtype=torch.bool)
    mask[list(sel)] = True
    return mask


def test_hand_computed_values():
    # no selection: one gap over the whole document, codes 0..18 spread by linspace
    assert hand(3, []) == [0, 9, 18]
    assert hand(1, []) == [0]
    # selected index 2 of 5: G0 = [0, 2) -> 0, 18 ; G1 = [2, 5) -> 20, 29, 38
    assert hand(5, [2]) == [0, 18, 20, 29, 38]
    # empty leading gap (s1 = 0) still advances the offset
    assert hand(4, [0]) == [20, 26, 32, 38]
    # two selections; a single-element gap gets code δ·j
    assert hand(5, [1, 2]) == [0, 20, 40, 49, 58]


@pytest.mark.parametrize("formula", ["linspace", "paper"])
def test_integer_formula_matches_float_path(formula):
    rng = np.random.default_rng(0)
    for n in list(range(1, 300)) + [1000, 4999, 20000]:
        for _ in range(3):
            m = int(rng.integers(0, min(n, 6) + 1))
            sel = sorted(rng.choice(n, size=m, replace=False).tolist()) if m else []
            got = relative_codes_by_gap(n, sel, 20, formula)
            want = float_reference(n, sel, 20, formula)
            np.testing.assert_array_equal(got, want, err_msg=f"n={n} sel={sel}")


def test_spec_example_n67_r55():
    # DESIGN §3.2: a naive float r*(ℓ/(n−1)) gives 14 here; the reference path gives 15
    assert relative_codes_by_gap(67, [], 20)[55] == 15


def test_paper_delta10():
    assert hand(3, []) != hand(3, [], 10)
    assert relative_codes_by_gap(3, [], 10, "paper").tolist() == [0, 3, 6]


def test_an_unknown_formula_is_refused_by_both():
    with pytest.raises(ValueError, match="relative_formula"):
        relative_codes_by_gap(3, [], 10, "Linspace")
    with pytest.raises(ValueError, match="relative_formula"):
        relative_codes(torch.zeros(3, dtype=torch.bool), 10, "Linspace")


def test_random_codes():
    rng = np.random.default_rng(1)
    codes = random_codes(50, rng, 2000)
    assert len(codes) == 50 and np.all(np.diff(codes) >= 1)  # segments keep order, indents sorted
    with pytest.raises(ValueError):
        random_codes(5, rng)
    with pytest.raises(ValueError):
        random_codes(2000, rng, 2000)


@pytest.mark.parametrize("formula", ["linspace", "paper"])
def test_the_fast_path_equals_the_definition(formula):
    """Every selection of up to 7 chunks (brute force: all 2^N masks), then random ones of larger
    samples, for one state ([N]) and for a sample's states at once ([S, N])."""
    cases = [(n, sel) for n in range(1, 8) for k in range(n + 1) for sel in itertools.combinations(range(n), k)]
    rng = np.random.default_rng(0)
    for n in (50, 333, 5000):
        for _ in range(8):
            k = int(rng.integers(0, 9))
            cases.append((n, tuple(sorted(rng.choice(n, size=k, replace=False).tolist()))))
    for n, sel in cases:
        want = relative_codes_by_gap(n, sel, 50, formula)
        got = relative_codes(mask_of(n, sel), 50, formula)
        assert got.dtype == torch.int64 and got.tolist() == want.tolist(), (n, sel)
    for n in {n for n, _ in cases}:
        states = [sel for m, sel in cases if m == n]
        batched = relative_codes(torch.stack([mask_of(n, sel) for sel in states]), 50, formula)
        assert batched.tolist() == [relative_codes_by_gap(n, sel, 50, formula).tolist() for sel in states]


def test_episode_codes_equal_the_definition_on_both_sides_of_the_choice():
    """Episode.codes takes the definition for its own state up to HOST_CODES_MAX_CHUNKS chunks and
    the fast path beyond and for other states; code_of (acting's code of one chunk) the definition."""
    pos = PositionSettings("relative", 20, "linspace", 2000)
    rng = np.random.default_rng(1)
    for n in (9, HOST_CODES_MAX_CHUNKS, HOST_CODES_MAX_CHUNKS + 1):
        sel = rng.choice(n, size=4, replace=False).tolist()  # selection order, not sorted
        ep = Episode(0, {"chunks": ["x"] * n}, ~mask_of(n, sel), list(sel))
        want = relative_codes_by_gap(n, sel, 20, "linspace")
        assert ep.codes(pos).tolist() == want.tolist()
        assert ep.codes(pos, ep.available.clone()).tolist() == want.tolist()  # the fast path
        assert [ep.code_of(pos, i) for i in (0, sel[0], n - 1)] == [want[0], want[sel[0]], want[n - 1]]
