import math

import pytest
import torch

from rl.model.qfunc import q_all, sample_policy, soft_values, twin_heads


def heads(s, a):
    """Both heads [S, 2, N] of states s [S, d] against chunks a [N, d]."""
    h = s.shape[-1] // 2
    return torch.stack((s[:, :h] @ a[:, :h].T, s[:, h:] @ a[:, h:].T), dim=1)


def brute_value(s, a, avail, k, alpha, soft=True, topk_before_mask=False):
    h = s.shape[0] // 2
    total = 0.0
    for sl in (slice(0, h), slice(h, None)):
        scores = [float(a[i, sl] @ s[sl]) for i in range(a.shape[0])]
        if not soft:
            total += max(scores[i] for i in range(len(scores)) if avail[i])
            continue
        if topk_before_mask:
            top = sorted(range(len(scores)), key=lambda i: -scores[i])[:k]
            m = max(scores[i] for i in top)
            mass = sum(math.exp((scores[i] - m) / alpha) for i in top if avail[i])
            total += m + alpha * math.log(max(mass, 1e-10))
        else:
            cand = sorted((i for i in range(len(scores)) if avail[i]), key=lambda i: -scores[i])[:k]
            m = max(scores[i] for i in cand)
            total += m + alpha * math.log(sum(math.exp((scores[i] - m) / alpha) for i in cand))
    return total


def test_soft_value_against_brute_force():
    g = torch.Generator().manual_seed(0)
    for trial in range(20):
        n, d = 9, 8
        s = torch.randn(3, d, generator=g)
        a = torch.randn(n, d, generator=g)
        avail = torch.rand(3, n, generator=g) > 0.4
        avail[:, trial % n] = True
        for soft, legacy in ((True, False), (True, True), (False, False)):
            got = soft_values(heads(s, a), avail, 5, 0.05, soft=soft, legacy_topk_before_mask=legacy)
            for row in range(3):
                want = brute_value(s[row], a, avail[row].tolist(), 5, 0.05, soft, legacy)
                assert abs(float(got[row]) - want) < 1e-4, (soft, legacy)


def test_soft_value_few_available_and_none():
    s = torch.randn(2, 4)
    a = torch.randn(6, 4)
    avail = torch.zeros(2, 6, dtype=torch.bool)
    avail[0, 2] = True  # fewer than k available
    v = soft_values(heads(s, a), avail, 5, 0.01)
    assert abs(float(v[0]) - brute_value(s[0], a, avail[0].tolist(), 5, 0.01)) < 1e-4
    assert float(v[1]) == 0.0  # nothing available -> V = 0


def test_soft_value_approaches_hard_max_as_alpha_shrinks():
    s, a = torch.randn(1, 6), torch.randn(10, 6)
    avail = torch.ones(1, 10, dtype=torch.bool)
    hard = soft_values(heads(s, a), avail, 5, 1.0, soft=False)
    soft = soft_values(heads(s, a), avail, 5, 1e-6)
    assert abs(float(hard - soft)) < 1e-4


def test_heads_sum_to_q():
    s, a = torch.randn(4, 8), torch.randn(4, 8)
    q1, q2 = twin_heads(s, a)
    torch.testing.assert_close(q1 + q2, (s * a).sum(-1))
    torch.testing.assert_close(q_all(s[0], a), a @ s[0])


def test_policy_respects_topk_and_availability():
    q = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 9.0])
    avail = torch.tensor([True, True, True, True, True, True, False])
    g = torch.Generator().manual_seed(0)
    picks = {sample_policy(q, avail, 2, 10.0, g) for _ in range(200)}
    assert picks == {0, 1}  # top-2 available only; the unavailable best is never taken
    greedyish = {sample_policy(q, avail, 5, 1e-4, g) for _ in range(50)}
    assert greedyish == {0}


# -- written against the surviving mutants of `mutmut run` (docs/TESTING.md) ---------------
def test_twin_heads_split_each_vector_in_half():
    """Head 1 is the dot product of the first halves, head 2 of the second (batch ≠ width)."""
    g = torch.Generator().manual_seed(1)
    s, a = torch.randn(3, 10, generator=g), torch.randn(3, 10, generator=g)
    q1, q2 = twin_heads(s, a)
    for b in range(3):
        assert float(q1[b]) == pytest.approx(sum(float(s[b, i] * a[b, i]) for i in range(5)), abs=1e-5)
        assert float(q2[b]) == pytest.approx(sum(float(s[b, i] * a[b, i]) for i in range(5, 10)), abs=1e-5)


def test_soft_value_is_the_default_and_k_none_means_all_available():
    g = torch.Generator().manual_seed(2)
    s, a = torch.randn(2, 8, generator=g), torch.randn(7, 8, generator=g)
    avail = torch.ones(2, 7, dtype=torch.bool)
    avail[1, :3] = False
    got = soft_values(heads(s, a), avail, 3, 0.5)  # α large: the soft value is far from the hard max
    hard = soft_values(heads(s, a), avail, 3, 0.5, soft=False)
    for row in range(2):
        assert float(got[row]) == pytest.approx(brute_value(s[row], a, avail[row].tolist(), 3, 0.5), abs=1e-5)
        assert abs(float(got[row] - hard[row])) > 1e-2
    for legacy in (False, True):
        got = soft_values(heads(s, a), avail, None, 0.5, legacy_topk_before_mask=legacy)
        for row in range(2):
            want = brute_value(s[row], a, avail[row].tolist(), 7, 0.5, True, legacy)
            assert float(got[row]) == pytest.approx(want, abs=1e-5), legacy


def test_soft_value_rows_with_different_numbers_available_below_k():
    """Each state's own count of available chunks limits its candidates, not the batch's."""
    g = torch.Generator().manual_seed(3)
    s, a = torch.randn(3, 6, generator=g), torch.randn(8, 6, generator=g)
    avail = torch.zeros(3, 8, dtype=torch.bool)
    avail[0, [1]] = True
    avail[1, [2, 5]] = True
    avail[2, [0, 3, 4, 6]] = True
    got = soft_values(heads(s, a), avail, 5, 0.3)
    for row in range(3):
        assert float(got[row]) == pytest.approx(brute_value(s[row], a, avail[row].tolist(), 5, 0.3), abs=1e-5)


def test_policy_k_none_and_reproducible_from_its_generator():
    q = torch.tensor([0.0, 0.1, 0.2, 0.3, 5.0])
    avail = torch.tensor([True, True, True, True, False])
    picks = {sample_policy(q, avail, None, 10.0, torch.Generator().manual_seed(i)) for i in range(100)}
    assert picks == {0, 1, 2, 3}  # every available chunk, never the unavailable one

    def draw(global_seed):
        torch.manual_seed(global_seed)  # the global stream must not matter (resume, data parallel)
        gen = torch.Generator().manual_seed(7)
        return [sample_policy(q, avail, 4, 1.0, gen) for _ in range(30)]

    assert draw(0) == draw(1)
