"""LLMFeedback (DESIGN §6.2): paid once vs legacy repeat, batching, failure modes, lazy imports."""

import subprocess
import sys

import pytest

from envs.feedback_llm import LLMFeedback
from tests.readers.conftest import llm_feedback_cfg as cfg

SAMPLE = {
    "id": "s0",
    "question": "Where is Mary? ",
    "answer": "kitchen",
    "chunks": ["Mary went to the garden.", "noise one.", "Mary went to the kitchen.", "noise two."],
    "sf_idx": [2],
}
SAMPLE2 = dict(SAMPLE, id="s1", answer="garden", sf_idx=[0])


class ScriptedBackend:
    """Answers 'kitchen' iff the kitchen sentence is in the prompt; records every batch."""

    name = "scripted"

    def __init__(self, fail=False):
        self.batches, self.failures, self.fail = [], 0, fail
        self.last_errors = []

    def generate(self, batch, max_tokens, temperature=0.0, top_p=1.0, enable_thinking=False):
        self.batches.append((batch, max_tokens, enable_thinking))
        if self.fail:
            self.last_errors = ["request 0 to http://x failed"]
            return [None] * len(batch)
        return [
            "The most recent location of Mary is kitchen."
            if "Mary went to the kitchen" in m[-1]["content"].split("Context:")[-1]
            else "The most recent location of Mary is garden."
            for m in batch
        ]


def run_episode(fb, steps):
    fb.reset(0, SAMPLE)
    out = []
    for sel in steps:
        out.append(fb.step([0], [sel]))
    return out


def test_paid_once_and_no_calls_after_success():
    be = ScriptedBackend()
    fb = LLMFeedback(cfg(), task="qa1_single-supporting-fact", backend=be)
    res = run_episode(fb, [[1], [1, 2], [1, 2, 3], [1, 2, 3, 0]])
    assert [r[0][0] for r in res] == [0.0, 1.0, 0.0, 0.0]
    assert fb.solved(0)
    assert len(be.batches) == 2  # no LLM calls once solved
    assert be.batches[0][1] == 32 and be.batches[0][2] is False  # thinking disabled
    # never_terminate (default true) keeps the episode going
    assert [r[1][0] for r in res] == [False, False, False, False]


def test_completed_when_terminating():
    fb = LLMFeedback(cfg(never_terminate=False), task="qa1", backend=ScriptedBackend())
    res = run_episode(fb, [[1], [1, 2], [1, 2, 3]])
    assert [r[1][0] for r in res] == [False, True, True]


def test_legacy_repeat_pays_every_step():
    be = ScriptedBackend()
    fb = LLMFeedback(cfg(), task="qa1", repeat_llm_reward=True, backend=be)
    res = run_episode(fb, [[1], [1, 2], [1, 2, 3]])
    assert [r[0][0] for r in res] == [0.0, 1.0, 1.0]
    assert len(be.batches) == 3


def test_one_batch_per_step_and_chunk_order():
    be = ScriptedBackend()
    fb = LLMFeedback(cfg(chunk_order="index", reward_scaling=2.0, completion_threshold=2.0), task="qa1", backend=be)
    fb.reset(0, SAMPLE)
    fb.reset(1, dict(SAMPLE, id="s1"))
    rewards, _ = fb.step([0, 1], [[2, 0], [3]])
    assert len(be.batches) == 1 and len(be.batches[0][0]) == 2
    ctx = be.batches[0][0][0][1]["content"]
    assert "Context: Mary went to the garden. Mary went to the kitchen.\n" in ctx  # index order
    assert rewards == [2.0, 0.0]
    rewards, _ = fb.step([0, 1], [[2, 0, 1], [3, 0]])
    assert len(be.batches[1][0]) == 1  # slot 0 solved: only slot 1 asked
    fb2 = LLMFeedback(cfg(), task="qa1", backend=ScriptedBackend())
    fb2.reset(0, SAMPLE)
    fb2.step([0], [[2, 0]])
    ctx2 = fb2.backend.batches[0][0][0][1]["content"]
    assert "Context: Mary went to the kitchen. Mary went to the garden.\n" in ctx2  # selection order


def test_failure_raise_zero_and_silent():
    fb = LLMFeedback(cfg(), task="qa1", backend=ScriptedBackend(fail=True))
    fb.reset(0, SAMPLE)
    with pytest.raises(RuntimeError, match="s0"):
        fb.step([0], [[2]])
    fb = LLMFeedback(cfg(on_failure="zero"), task="qa1", backend=ScriptedBackend(fail=True))
    fb.reset(0, SAMPLE)
    assert fb.step([0], [[2]])[0] == [0.0]
    assert fb.stats()["feedback/failures"] == 1.0
    fb = LLMFeedback(cfg(), task="qa1", silent_llm_failures=True, backend=ScriptedBackend(fail=True))
    fb.reset(0, SAMPLE)
    assert fb.step([0], [[2]])[0] == [0.0] and fb.failures == 1


def test_bad_config_values():
    with pytest.raises(ValueError):
        LLMFeedback(cfg(on_failure="ignore"), task="qa1", backend=ScriptedBackend())
    with pytest.raises(ValueError):
        LLMFeedback(cfg(chunk_order="random"), task="qa1", backend=ScriptedBackend())
    with pytest.raises(ValueError):
        LLMFeedback(cfg(metric="bleu"), task="qa1", backend=ScriptedBackend())
    with pytest.raises(ValueError, match="NIAH"):  # label metrics have no NIAH labels: refused at build time
        LLMFeedback(cfg(metric="acc"), task="niah", backend=ScriptedBackend())


class ThinkingBackend:
    name = "thinking"
    last_errors: list = []

    def __init__(self, answer):
        self.answer = answer

    def generate(self, batch, *a, **k):
        return [self.answer] * len(batch)


def test_reasoning_block_is_not_scored():
    """With thinking allowed, only the text after the reasoning block is scored."""
    for answer, reward in (("<think>kitchen</think>I do not know", 0.0), ("<think>garden?</think>kitchen", 1.0)):
        fb = LLMFeedback(cfg(metric="acc", disable_thinking=False), task="qa1", backend=ThinkingBackend(answer))
        fb.reset(0, SAMPLE)
        assert fb.step([0], [[2]])[0] == [reward]


def test_through_real_server(chat_server):
    """use_api: the feedback builds the server backend from its config and the server is called."""
    chat_server.answer_fn = lambda p: (
        "kitchen" if "Mary went to the kitchen" in p["messages"][-1]["content"].split("Context:")[-1] else "garden"
    )
    fb = LLMFeedback(cfg(api_base_url=chat_server.url, max_at_same_time=4, timeout_s=5), task="qa1")
    fb.reset(0, SAMPLE)
    fb.reset(1, SAMPLE2)
    rewards, _ = fb.step([0, 1], [[2], [1]])
    assert rewards == [1.0, 1.0]  # slot 1: gold 'garden', model says garden
    fb.reset(1, SAMPLE2)
    assert fb.step([1], [[2]])[0] == [0.0]
    assert chat_server.requests[0]["chat_template_kwargs"] == {"enable_thinking": False}
    chat_server.mode = "error"
    fb2 = LLMFeedback(cfg(api_base_url=chat_server.url, max_retries=0, on_failure="zero"), task="qa1")
    fb2.reset(0, SAMPLE)
    assert fb2.step([0], [[2]])[0] == [0.0] and fb2.failures == 1


def test_config_file_and_build_feedback():
    from pathlib import Path

    from omegaconf import OmegaConf

    from envs.feedback import build_feedback

    c = OmegaConf.load(Path(__file__).resolve().parents[2] / "configs" / "feedback" / "llm.yaml")
    c = OmegaConf.create({"feedback": c})
    fcfg = c.feedback
    for key in (
        "type",
        "model",
        "reward_scaling",
        "completion_threshold",
        "sampling_params",
        "vllm_config",
        "use_api",
        "api_base_url",
        "max_at_same_time",
        "metric",
        "disable_thinking",
        "timeout_s",
        "max_retries",
        "on_failure",
        "chunk_order",
    ):
        assert key in fcfg, key
    assert fcfg.completion_threshold == 1.0
    fb = build_feedback(fcfg, {}, "train", task="qa2_two-supporting-facts")
    assert isinstance(fb, LLMFeedback) and fb.task == "qa2" and fb.backend.name == "server"


def test_imports_are_lazy():
    code = (
        "import sys, envs.feedback_llm, prompts_and_metrics, prompts_and_metrics.llm, "
        "prompts_and_metrics.metrics, prompts_and_metrics.filters, prompts_and_metrics.prompts; "
        "bad = [m for m in ('vllm', 'httpx', 'openai', 'aiohttp', 'urllib.request', 'torch', 'transformers') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_last_step_kwarg_and_state_roundtrip():
    fb = LLMFeedback(cfg(), task="qa1", backend=ScriptedBackend())
    fb.reset(0, SAMPLE)
    assert fb.step([0], [[2]], last_step=[False])[0] == [1.0]
    state = fb.state_dict()
    fb2 = LLMFeedback(cfg(), task="qa1", backend=ScriptedBackend())
    fb2.reset(0, SAMPLE)
    fb2.load_state_dict(state)
    assert fb2.solved(0) and fb2.step([0], [[2, 1]])[0] == [0.0] and fb2.backend.batches == []
