"""LLM-answer feedback (DESIGN §6.2, ``feedback.type: babilong_em`` / ``llm``).

After each vectorised step the question and the chunks each env holds go to a reader LLM in one
request batch; the score s_t = metric(prediction, answer) · reward_scaling. An env is completed when
s_t ≥ completion_threshold and is paid once (r_t = s_t at that step, 0 otherwise, no more calls
until reset). ``legacy.repeat_llm_reward`` (ref) pays s_t at every step and keeps calling.

Failures: the backend retries (timeout_s, max_retries, backoff); a request that still fails either
raises (``on_failure: raise``, default) or scores 0 and is counted in ``failures``
(``on_failure: zero``, warning). ``legacy.silent_llm_failures`` (ref) turns a failure into an empty
answer, i.e. a silent 0, still counted.

No LLM client is imported until the backend is built (first construction of LLMFeedback).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from envs.errors import FeedbackError
from envs.types import Sample
from prompts_and_metrics.metrics import NIAH_TASKS, babilong_acc, babilong_em, babilong_f1, task_key
from prompts_and_metrics.prompts import babilong_messages, strip_think

log = logging.getLogger(__name__)

METRICS: dict[str, Callable[[str, str, str, str], float]] = {
    "em": lambda out, ans, q, task: babilong_em(out, ans),
    "babilong_em": lambda out, ans, q, task: babilong_em(out, ans),
    "acc": lambda out, ans, q, task: babilong_acc(out, ans, q, task),
    "f1": lambda out, ans, q, task: babilong_f1(out, ans, task),
}


def _plain(node: Any) -> dict:
    if node is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(node):
            return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    except ImportError:
        pass
    return dict(node)


class LLMFeedback:
    """Feedback protocol (envs/feedback.py) backed by a reader LLM. ``feedback_cfg`` is the
    ``feedback`` node of configs/feedback/llm.yaml (every key read here, defaulted only there).

    ``backend``: an already built backend (tests, sharing one engine); else one is built from the
    config: ``use_api`` -> server backend, otherwise vLLM if importable, else transformers.
    """

    LEGACY = ("repeat_llm_reward", "silent_llm_failures", "prompt_extra_question_mark")  # its keywords

    def __init__(
        self,
        feedback_cfg: Any,
        task: str,
        backend: Any = None,
        repeat_llm_reward: bool = False,
        silent_llm_failures: bool = False,
        prompt_extra_question_mark: bool = False,
    ):
        self.task = task_key(task)
        self.reward_scaling = float(feedback_cfg["reward_scaling"])
        self.completion_threshold = float(feedback_cfg["completion_threshold"])
        metric = str(feedback_cfg["metric"])
        if metric not in METRICS:
            raise ValueError(f"feedback.metric {metric!r} unknown; choose one of {sorted(METRICS)}")
        if metric in ("acc", "f1") and self.task in NIAH_TASKS:
            raise ValueError(f"feedback.metric {metric!r} scores bAbI answer labels; NIAH ({self.task}) takes em")
        self.metric = METRICS[metric]
        sp = _plain(feedback_cfg["sampling_params"])
        self.max_tokens = int(sp["max_tokens"])
        self.temperature = float(sp["temperature"])
        self.top_p = float(sp["top_p"])
        self.disable_thinking = bool(feedback_cfg["disable_thinking"])
        self.chunk_order = str(feedback_cfg["chunk_order"])
        if self.chunk_order not in ("selection", "index"):
            raise ValueError(f"feedback.chunk_order must be 'selection' or 'index', got {self.chunk_order!r}")
        self.on_failure = str(feedback_cfg["on_failure"])
        if self.on_failure not in ("raise", "zero"):
            raise ValueError(f"feedback.on_failure must be 'raise' or 'zero', got {self.on_failure!r}")
        self.repeat_reward = repeat_llm_reward
        self.silent_failures = silent_llm_failures
        self.extra_question_mark = prompt_extra_question_mark
        self.model = str(feedback_cfg["model"])
        self.server = str(feedback_cfg["api_base_url"])
        self.use_api = bool(feedback_cfg["use_api"])
        # As with ground-truth feedback: the returned ``completed`` ends the episode only when
        # never_terminate is false; payment (once) always follows the internal solved state.
        self.never_terminate = bool(feedback_cfg["never_terminate"])
        self.backend = backend if backend is not None else self._build_backend(feedback_cfg)
        self.failures = 0
        self.calls = 0
        self._samples: dict[int, Sample] = {}
        self._done: dict[int, bool] = {}

    def _build_backend(self, cfg: Any) -> Any:
        from prompts_and_metrics.llm import build_backend

        # The backend never raises on a failed request; this class decides (raise / zero / silent).
        if self.use_api:
            return build_backend(
                "server",
                self.model,
                api_base_url=self.server,
                api_key=None,  # from the environment only
                max_at_same_time=int(cfg["max_at_same_time"]),
                timeout_s=float(cfg["timeout_s"]),
                max_retries=int(cfg["max_retries"]),
                on_failure="none",
            )
        vc = _plain(cfg["vllm_config"])
        return build_backend(str(cfg["backend"]), self.model, **vc)

    @property
    def terminates(self) -> bool:
        return not self.never_terminate

    def solved(self, slot: int) -> bool:
        """Whether the env in ``slot`` reached the completion threshold this episode."""
        return self._done.get(slot, False)

    def reset(self, slot: int, sample: Sample) -> None:
        self._samples[slot] = sample
        self._done[slot] = False

    def _messages(self, sample: Sample, selected: Sequence[int]) -> list[dict]:
        order = list(selected) if self.chunk_order == "selection" else sorted(selected)
        context = " ".join(sample["chunks"][i] for i in order)
        return babilong_messages(self.task, context, sample["question"], self.extra_question_mark)

    def _generate(self, batch: list[list[dict]], slots: list[int]) -> list[str | None]:
        from prompts_and_metrics.llm import GenerationError

        try:
            outs = self.backend.generate(
                batch,
                self.max_tokens,
                self.temperature,
                self.top_p,
                enable_thinking=False if self.disable_thinking else None,
            )
        except GenerationError as exc:  # a backend that raises on its own (vllm/transformers)
            outs = [None] * len(batch)
            err = str(exc)
        else:
            err = "; ".join(getattr(self.backend, "last_errors", []) or [])
        self.calls += len(batch)
        failed = [s for s, o in zip(slots, outs) if o is None]
        if failed:
            self.failures += len(failed)
            ids = [self._samples[s].get("id") for s in failed]
            if self.silent_failures:
                return [o if o is not None else "" for o in outs]
            if self.on_failure == "raise":
                raise FeedbackError(
                    f"LLM feedback: {len(failed)} request(s) to {self.server if self.use_api else self.model} "
                    f"failed for sample ids {ids}: {err or 'no output'}. Set feedback.on_failure=zero to "
                    "score failures as 0 instead, or start the server / pass feedback.api_base_url=<its URL>."
                )
            log.warning("LLM feedback: %d request(s) failed (samples %s), scored 0: %s", len(failed), ids, err)
        return outs

    def step(
        self,
        slots: Sequence[int],
        selected: Sequence[Sequence[int]],
        last_step: Sequence[bool] | None = None,
    ) -> tuple[list[float], list[bool]]:
        """Rewards and completed flags per slot (``last_step`` is accepted for protocol parity with
        ground-truth feedback; the LLM reward is paid when earned, never deferred)."""
        rewards = [0.0] * len(slots)
        completed = [False] * len(slots)
        need = [k for k, s in enumerate(slots) if self.repeat_reward or not self._done[s]]
        for k, s in enumerate(slots):
            completed[k] = self._done[s] and not self.never_terminate
        if not need:
            return rewards, completed
        batch = [self._messages(self._samples[slots[k]], selected[k]) for k in need]
        outs = self._generate(batch, [slots[k] for k in need])
        for k, out in zip(need, outs):
            s = slots[k]
            sample = self._samples[s]
            # a reasoning block (disable_thinking: false) is never scored, as in the readers
            score = (
                0.0
                if out is None
                else self.metric(strip_think(out), str(sample["answer"]), sample["question"], self.task)
            )
            score *= self.reward_scaling
            done = score >= self.completion_threshold
            if self.repeat_reward:
                rewards[k] = score
            elif done:
                rewards[k] = score
            self._done[s] = self._done[s] or done
            completed[k] = self._done[s] and not self.never_terminate
        return rewards, completed

    def state_dict(self) -> dict:
        """Solved flags and counters (samples are re-attached by the env's reset on resume)."""
        return {"done": dict(self._done), "failures": self.failures, "calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self._done.update({int(k): bool(v) for k, v in state.get("done", {}).items()})
        self.failures = int(state.get("failures", 0))
        self.calls = int(state.get("calls", 0))

    def stats(self) -> dict[str, float]:
        """Counters for the logger (``feedback/failures``, ``feedback/calls``)."""
        return {"feedback/failures": float(self.failures), "feedback/calls": float(self.calls)}
