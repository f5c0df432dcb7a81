import torch
from rotary_embedding_torch import RotaryEmbedding

from envs.env import PositionSettings
from rl.model.model_keys import ModelKeys, Predictor
from rl.model.rotary import HalfRotary


def test_matches_rotary_embedding_torch_per_half():
    d = 64
    rope = HalfRotary(d)
    ref = RotaryEmbedding(dim=d // 2)
    x = torch.randn(7, d)
    codes = torch.tensor([0, 1, 5, 17, 138, 999, 4321])
    got = rope(x, codes)
    for i, c in enumerate(codes.tolist()):
        for half in (slice(0, d // 2), slice(d // 2, d)):
            # the package rotates a sequence; row c of a (c+1)-long sequence has position c
            seq = x[i, half].expand(c + 1, -1).unsqueeze(0)
            want = ref.rotate_queries_or_keys(seq)[0, c]
            torch.testing.assert_close(got[i, half], want, atol=1e-4, rtol=1e-4)


def test_keeps_norms_and_scores_depend_on_differences_only():
    d = 32
    rope = HalfRotary(d)
    a, b = torch.randn(d), torch.randn(d)
    for p in (0, 3, 100, 123456):
        ra = rope(a[None], torch.tensor([p]))[0]
        torch.testing.assert_close(ra.norm(), a.norm(), atol=1e-4, rtol=1e-4)
    # <R(p)a, R(q)b> depends only on p - q (per half, hence in total)
    s1 = rope(a[None], torch.tensor([10]))[0] @ rope(b[None], torch.tensor([3]))[0]
    s2 = rope(a[None], torch.tensor([107]))[0] @ rope(b[None], torch.tensor([100]))[0]
    torch.testing.assert_close(s1, s2, atol=1e-4, rtol=1e-4)
    # code 0 is the identity
    torch.testing.assert_close(rope(a[None], torch.tensor([0]))[0], a)


def test_interpolate_factor_floors_the_position_before_rotating():
    # algo.model.predictor.interpolate_factor: p̂ = int(p / factor), a floor since positions are ≥ 0
    d = 16
    x = torch.randn(9, d)
    p = torch.tensor([0, 1, 2, 3, 4, 5, 7, 11, 1000])
    for factor in (2, 3, 2.5):
        want = HalfRotary(d)(x, torch.tensor([int(v / factor) for v in p.tolist()]))
        torch.testing.assert_close(HalfRotary(d, interpolate_factor=factor)(x, p), want)
    # with factor 1 nothing changes; with factor 2 positions 4 and 5 share one rotation
    torch.testing.assert_close(HalfRotary(d, interpolate_factor=1)(x, p), HalfRotary(d)(x, p))
    r = HalfRotary(d, interpolate_factor=2)(x[:1].expand(2, -1), torch.tensor([4, 5]))
    torch.testing.assert_close(r[0], r[1])


def test_agent_applies_the_configured_interpolate_factor():
    # algo.model.predictor.interpolate_factor reaches the agent's rotation, not only the config

    from rl.model.fast.switches import SpeedSwitches
    from rl.model.precision import Precision
    from rl.model.qnetwork import QNetwork

    cpu = torch.device("cpu")
    model = ModelKeys(name="offline:minilm", predictor=Predictor(num_layers=1, interpolate_factor=3))
    layout = {"max_action_length": 12, "max_action_length_in_memory": 8, "max_state_length": 40}
    qnet = QNetwork(
        model,
        layout,
        cpu,
        Precision.resolve("fp32", cpu),
        64,
        SpeedSwitches(),
        PositionSettings("relative", 1, "paper", 10),
        False,
    )
    x, p = torch.randn(4, qnet.dim), torch.tensor([0, 2, 3, 7])
    torch.testing.assert_close(qnet.rope(x, p), HalfRotary(qnet.dim)(x, torch.tensor([0, 0, 1, 2])))
