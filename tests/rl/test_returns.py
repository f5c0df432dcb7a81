import pytest
import torch

from rl.learners.returns import lambda_returns


def brute_force(r, d, v, boot, gamma, lam, off_by_one=False):
    """Per-env, per-step recursion written out with Python floats."""
    L, E = r.shape
    out = torch.zeros(L, E, dtype=torch.float64)
    for e in range(E):
        g_next = None
        for t in reversed(range(L)):
            nd = 1.0 - float(d[t, e])
            if t == L - 1:
                g = float(r[t, e]) + gamma * nd * float(boot[e])
            else:
                v_next = float(v[t + 1, e])
                if off_by_one and t == L - 2:
                    v_next = (1.0 - float(d[L - 1, e])) * float(boot[e])
                g = float(r[t, e]) + gamma * nd * ((1 - lam) * v_next + lam * g_next)
            out[t, e] = g
            g_next = g
    return out


@pytest.mark.parametrize("off_by_one", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_against_brute_force(seed, off_by_one):
    g = torch.Generator().manual_seed(seed)
    L, E = 9, 4
    r = torch.rand(L, E, generator=g)
    d = (torch.rand(L, E, generator=g) < 0.3).float()
    d[-1, 0] = 1.0  # episode ending at the last step
    d[-2, 1] = 1.0  # ... and at the second-to-last step
    v = torch.randn(L, E, generator=g)
    boot = torch.randn(E, generator=g)
    got = lambda_returns(r, d, v, boot, 0.99, 0.65, off_by_one)
    want = brute_force(r, d, v, boot, 0.99, 0.65, off_by_one)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_legacy_differs_only_where_it_should():
    L, E = 6, 2
    r, d = torch.zeros(L, E), torch.zeros(L, E)
    v = torch.arange(L * E, dtype=torch.float32).view(L, E)
    boot = torch.tensor([100.0, 200.0])
    a = lambda_returns(r, d, v, boot, 1.0, 0.5)
    b = lambda_returns(r, d, v, boot, 1.0, 0.5, legacy_off_by_one=True)
    assert torch.equal(a[-1], b[-1])
    assert not torch.equal(a[-2], b[-2])


def test_lambda_one_is_monte_carlo_and_zero_is_td():
    L, E = 4, 1
    r = torch.tensor([[1.0], [0.0], [2.0], [0.0]])
    d = torch.tensor([[0.0], [0.0], [1.0], [0.0]])
    v = torch.full((L, E), 5.0)
    boot = torch.tensor([7.0])
    mc = lambda_returns(r, d, v, boot, 1.0, 1.0)
    assert mc[:3, 0].tolist() == [3.0, 2.0, 2.0] and mc[3, 0] == 7.0
    td = lambda_returns(r, d, v, boot, 1.0, 0.0)
    assert td[:, 0].tolist() == [6.0, 5.0, 2.0, 7.0]
