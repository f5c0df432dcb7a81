import numpy as np
import pytest
import torch

from envs.positions import random_codes, relative_codes


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
    mask = torch.zeros(n, dtype=torch.bool)
    mask[list(sel)] = True
    return relative_codes(mask, delta).tolist()


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
            mask = torch.zeros(n, dtype=torch.bool)
            mask[sel] = True
            got = relative_codes(mask, 20, formula).numpy()
            want = float_reference(n, sel, 20, formula)
            np.testing.assert_array_equal(got, want, err_msg=f"n={n} sel={sel}")


def test_spec_example_n67_r55():
    # DESIGN §3.2: a naive float r*(ℓ/(n−1)) gives 14 here; the reference path gives 15
    assert relative_codes(torch.zeros(67, dtype=torch.bool), 20)[55].item() == 15


def test_paper_delta10():
    assert hand(3, []) != relative_codes(torch.zeros(3, dtype=torch.bool), 10).tolist()
    assert relative_codes(torch.zeros(3, dtype=torch.bool), 10, "paper").tolist() == [0, 3, 6]


def test_random_codes():
    rng = np.random.default_rng(1)
    codes = random_codes(50, rng, 2000)
    assert len(codes) == 50 and np.all(np.diff(codes) >= 1)  # segments keep order, indents sorted
    with pytest.raises(ValueError):
        random_codes(5, rng)
    with pytest.raises(ValueError):
        random_codes(2000, rng, 2000)


def test_host_and_batched_relative_codes_equal_the_single_state_codes():
    """The numpy path (acting on small samples) and the [S, N] batched path (target values)
    give exactly the per-state torch codes."""
    import numpy as np
    import torch

    from envs.positions import relative_code, relative_codes, relative_codes_host

    rng = np.random.default_rng(0)
    for formula in ("linspace", "paper"):
        for n in (1, 2, 7, 100, 333):
            masks = []
            for _ in range(6):
                sel = sorted(rng.choice(n, size=int(rng.integers(0, min(n, 8) + 1)), replace=False).tolist())
                mask = torch.zeros(n, dtype=torch.bool)
                mask[sel] = True
                want = relative_codes(mask, 50, formula)
                assert torch.equal(torch.from_numpy(relative_codes_host(n, sel, 50, formula)), want)
                # acting's one-chunk code (the code a transition keeps), in any selection order
                shuffled = rng.permutation(sel).tolist()
                assert [relative_code(n, shuffled, i, 50, formula) for i in range(n)] == want.tolist()
                masks.append((mask, want))
            batched = relative_codes(torch.stack([m for m, _ in masks]), 50, formula)
            assert torch.equal(batched, torch.stack([w for _, w in masks]))
