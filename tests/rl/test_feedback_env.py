import pytest
import torch
from omegaconf import OmegaConf

from envs.env import PositionSettings, VecRetrievalEnv
from envs.feedback import GroundTruthFeedback, GroundTruthSettings, build_feedback
from envs.legacy import Legacy
from tests.conftest import CONFIGS

FEEDBACK = OmegaConf.load(f"{CONFIGS}/feedback/defaults.yaml")  # type gt, ground_truth (nulls = the env's)
BABILONG_DEFAULTS = OmegaConf.load(f"{CONFIGS}/envs/babilong.yaml").feedback_defaults


def settings(**kw):
    """Ground-truth settings spelled out; a test names what it changes."""
    base = dict(
        completion_reward=1.0,
        per_fact_reward=0.0,
        penalize_extra_steps=True,
        never_terminate=True,
        reward_timing="completion",
        empty_gold="refuse",
    )
    return GroundTruthSettings(**{**base, **kw})


def sample(i=0, n=6, gold=(1, 3)):
    return {"id": i, "question": "q?", "answer": "a", "chunks": [f"c{j}" for j in range(n)], "sf_idx": list(gold)}


def test_completion_reward_paid_once_with_penalty():
    fb = GroundTruthFeedback(settings(penalize_extra_steps=True, never_terminate=True))
    fb.reset(0, sample())
    r, c = fb.step([0], [[0]])
    assert r == [0.0] and c == [False]
    r, _ = fb.step([0], [[0, 1]])
    assert r == [0.0]
    r, c = fb.step([0], [[0, 1, 3]])
    assert r[0] == pytest.approx(0.5 + 0.5 * 2 / (3 + 1e-5))
    assert c == [False]  # never_terminate keeps the episode going
    r, _ = fb.step([0], [[0, 1, 3, 4]])
    assert r == [0.0]  # paid once


def test_terminal_timing_and_per_fact_and_termination():
    fb = GroundTruthFeedback(
        settings(penalize_extra_steps=False, never_terminate=False, per_fact_reward=0.25, reward_timing="terminal")
    )
    fb.reset(0, sample())
    r, c = fb.step([0], [[1]], last_step=[False])
    assert r == [0.25] and c == [False]
    r, c = fb.step([0], [[1, 3]], last_step=[False])
    assert r == [0.25] and c == [True]  # completed, but the terminal reward waits for the end
    r, _ = fb.step([0], [[1, 3, 0]], last_step=[True])
    assert r == [1.0]


@pytest.mark.parametrize("penalize, unknown", [(True, False), (False, False), (True, True)])
def test_empty_or_unknown_gold_is_refused_in_training_and_pays_nothing_in_evaluation(penalize, unknown):
    # ∅ ⊆ S_1 would make such a sample "complete" at step 1: 0.5 with the step penalty
    # (0.5 + 0.5·0/(1+1e-5)), 1.0 without (ruler_qa's setting). Neither may be paid.
    s = sample(7, gold=() if not unknown else (2,))
    if unknown:
        s["sf_known"] = False  # an answer-only set: its sf_idx is not gold
    train = build_feedback(FEEDBACK, {"feedback_defaults": BABILONG_DEFAULTS}, "train")
    with pytest.raises(ValueError, match="sample 7 has no gold chunks"):
        train.reset(0, s)
    fb = GroundTruthFeedback(
        settings(penalize_extra_steps=penalize, never_terminate=False, per_fact_reward=0.25, empty_gold="zero")
    )
    fb.reset(0, s)
    for sel in ([2], [2, 0], [2, 0, 1]):
        r, c = fb.step([0], [sel], last_step=[len(sel) == 3])
        assert r == [0.0] and c == [False]
    test = build_feedback(FEEDBACK, {"feedback_defaults": BABILONG_DEFAULTS}, "test")
    assert test.s.empty_gold == "zero" and train.s.empty_gold == "refuse"


def test_build_feedback_priorities():
    envs = OmegaConf.create(
        {
            "feedback_defaults": {
                "train": {"penalize_extra_steps": True, "never_terminate": False},
                "test": {"penalize_extra_steps": False, "never_terminate_ref": False},
            }
        }
    )
    fcfg = OmegaConf.merge(FEEDBACK, {"ground_truth": {"penalize_extra_steps": None, "never_terminate": True}})
    train = build_feedback(fcfg, envs, "train")
    assert train.s.never_terminate is True and train.s.penalize_extra_steps is True  # CLI wins, env fills
    test = build_feedback(fcfg, envs, "test")
    assert test.s.never_terminate is True and test.s.penalize_extra_steps is False  # tests never stop on GT
    oracle = build_feedback(fcfg, envs, "test", legacy=Legacy(oracle_stop=True))
    assert oracle.s.never_terminate is False
    with pytest.raises(ValueError):
        build_feedback(OmegaConf.create({"type": "nope"}), envs, "train")


def test_env_steps_masks_codes_and_dones():
    data = [sample(0, 5, (1,)), sample(1, 5, (2, 4))]
    fb = GroundTruthFeedback(settings(never_terminate=False))
    env = VecRetrievalEnv(
        data, fb, 2, 3, PositionSettings("relative", 20, "linspace", 2000), True, torch.device("cpu"), seed=0
    )
    ep0, ep1 = env.start(0, 0), env.start(1, 1)
    assert ep0.codes(env.pos).tolist() == [0, 4, 9, 13, 18]
    r, d, trunc = env.step([0, 1], [1, 4])
    assert d == [True, False] and trunc == [False, False] and r[0] > 0
    assert not bool(ep1.available[4]) and ep1.codes(env.pos).tolist() == [0, 6, 12, 18, 20]
    for bad in (4, 5, -1):  # taken, past the end, negative (no wrap-around to the last chunk)
        with pytest.raises(ValueError, match="not available"):
            env.step([1], [bad])
    env.step([1], [0])
    r, d, trunc = env.step([1], [3])
    assert d == [True] and trunc == [True]  # time limit reached without completion


def test_env_state_roundtrip():
    data = [sample(i, 6, (1, 2)) for i in range(10)]

    def mk():
        return VecRetrievalEnv(
            data,
            GroundTruthFeedback(settings()),
            3,
            4,
            PositionSettings("random", 20, "linspace", max_chunks_count=50),
            False,
            torch.device("cpu"),
            seed=1,
        )

    a = mk()
    a.reset_all()
    a.step([0, 1, 2], [1, 0, 5])
    b = mk()
    b.load_state_dict(a.state_dict())
    for ea, eb in zip(a.episodes, b.episodes):
        assert ea.index == eb.index and ea.selected == eb.selected
        assert torch.equal(ea.available, eb.available) and torch.equal(ea.random_positions, eb.random_positions)
    assert a.rng.integers(1000) == b.rng.integers(1000)


@pytest.mark.parametrize("processor", ["none", "absolute", "random", "relative"])
def test_code_of_reads_the_chunk_code_of_the_current_state(processor):
    """Episode.code_of (the code acting keeps with a transition, computed on the host) equals the
    codes tensor's entry for that chunk in every state of an episode."""
    data = [sample(i, 12, (1, 2)) for i in range(3)]
    env = VecRetrievalEnv(
        data,
        GroundTruthFeedback(settings()),
        1,
        6,
        PositionSettings(processor, 20, "linspace", max_chunks_count=60),
        True,
        torch.device("cpu"),
        seed=3,
    )
    ep = env.start(0, 2)
    for action in (7, 0, 11, 3):
        codes = ep.codes(env.pos)
        want = [-1] * ep.n_chunks if codes is None else codes.tolist()
        assert [ep.code_of(env.pos, a) for a in range(ep.n_chunks)] == want
        env.step([0], [action])
