"""Feedback (reward) models, DESIGN §6.

A feedback model is stateful per environment slot: ``reset(slot, sample)`` at the start of an
episode, then ``step(slots, selected)`` after each vectorised step, where ``selected[k]`` lists
the chunk indices held by env ``slots[k]`` in selection order (the newest last) and
``last_step[k]`` says whether that step exhausts the episode's budget. It returns one
reward and one ``completed`` flag per slot. Batching across slots is what lets the LLM feedback
send one request batch per vectorised step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from envs.legacy import ALL_OFF, Legacy
from envs.types import Sample, sf_known


class Feedback(Protocol):
    def reset(self, slot: int, sample: Sample) -> None: ...

    def step(
        self, slots: Sequence[int], selected: Sequence[Sequence[int]], last_step: Sequence[bool] | None = None
    ) -> tuple[list[float], list[bool]]: ...


@dataclass
class GroundTruthSettings:
    """Filled by :func:`build_feedback` from configs/feedback/defaults.yaml and the env's
    ``feedback_defaults`` (the only defaults of these values)."""

    completion_reward: float
    per_fact_reward: float
    penalize_extra_steps: bool
    never_terminate: bool
    reward_timing: str  # completion (ref) | terminal (paper's text)
    # a sample without known gold: "refuse" (training: an error naming the sample) or "zero"
    # (evaluation: return 0, the episode never completes)
    empty_gold: str


class GroundTruthFeedback:
    """Reward from the gold chunk indices (DESIGN §6.1).

    r_t = per_fact_reward·[a_t ∈ F] + [F ⊆ S_{t+1} for the first time]·R_c, with
    R_c = completion_reward·(0.5 + 0.5·|F|/(|S_{t+1}|+1e-5)) under penalize_extra_steps.
    The completion reward is paid once. With ``reward_timing: terminal`` it is paid at the
    episode's last step instead (the paper's description), which the env signals through
    ``last_step``. ``completed`` ends the episode unless ``never_terminate``.

    A sample whose gold is empty or unknown (``sf_known`` false) would otherwise be "complete"
    before any step (∅ ⊆ S) and pay 0.5 (1.0 without the step penalty) at step 1: under
    ``empty_gold: refuse`` (training) :meth:`reset` raises, naming the sample; under ``zero``
    (evaluation) such an episode earns 0 and never completes.
    """

    def __init__(self, settings: GroundTruthSettings):
        if settings.reward_timing not in ("completion", "terminal"):
            raise ValueError(f"reward_timing must be 'completion' or 'terminal', got {settings.reward_timing!r}")
        if settings.empty_gold not in ("refuse", "zero"):
            raise ValueError(f"empty_gold must be 'refuse' or 'zero', got {settings.empty_gold!r}")
        self.s = settings
        self._gold: dict[int, frozenset[int]] = {}
        self._paid: dict[int, bool] = {}

    def reset(self, slot: int, sample: Sample) -> None:
        gold = frozenset(sample["sf_idx"]) if sf_known(sample) else frozenset()
        if not gold and self.s.empty_gold == "refuse":
            why = "its gold is unknown (sf_known false)" if not sf_known(sample) else "its sf_idx is empty"
            raise ValueError(
                f"sample {sample['id']!r} has no gold chunks ({why}): ground-truth reward cannot train on it. "
                f"Train on a set with supporting facts, or use feedback.type=llm for answer-only data"
            )
        self._gold[slot] = gold
        self._paid[slot] = False

    def completion_value(self, n_gold: int, n_selected: int) -> float:
        if not self.s.penalize_extra_steps:
            return self.s.completion_reward
        return self.s.completion_reward * (0.5 + 0.5 * n_gold / (n_selected + 1e-5))

    def step(
        self,
        slots: Sequence[int],
        selected: Sequence[Sequence[int]],
        last_step: Sequence[bool] | None = None,
    ) -> tuple[list[float], list[bool]]:
        rewards, completed = [], []
        for k, (slot, sel) in enumerate(zip(slots, selected)):
            gold = self._gold[slot]
            held = set(sel)
            done = bool(gold) and gold <= held
            r = self.s.per_fact_reward * (1.0 if sel and sel[-1] in gold else 0.0)
            pay_now = self.s.reward_timing == "completion" or (last_step is not None and last_step[k])
            if done and pay_now and not self._paid[slot]:
                r += self.completion_value(len(gold), len(held))
                self._paid[slot] = True
            rewards.append(r)
            completed.append(done and not self.s.never_terminate)
        return rewards, completed

    def state_dict(self) -> dict[str, Any]:
        return {"paid": dict(self._paid)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._paid.update({int(k): bool(v) for k, v in state["paid"].items()})


def build_feedback(feedback_cfg: Any, envs_cfg: Any, phase: str, task: str = "", legacy: Legacy = ALL_OFF) -> Feedback:
    """The feedback model for ``phase`` ('train' or 'test').

    Ground-truth settings come from ``feedback.ground_truth`` where set (not null), else from the
    env's ``feedback_defaults`` (DESIGN §6.1 table). Test envs never terminate on ground truth
    unless ``legacy.oracle_stop`` restores the reference's per-env value (DESIGN §1.5). LLM
    feedback gets the legacy switches it reads as booleans.
    """
    ftype = str(feedback_cfg["type"])
    if ftype in ("babilong_em", "llm"):
        from envs.feedback_llm import LLMFeedback  # lazy: vLLM/HTTP only when asked for

        return LLMFeedback(feedback_cfg, task, **legacy.pick(LLMFeedback.LEGACY))
    if ftype != "gt":
        raise ValueError(f"unknown feedback.type {ftype!r}; use 'gt' or 'babilong_em' (alias 'llm')")
    gt = feedback_cfg["ground_truth"]
    env_defaults = envs_cfg["feedback_defaults"][phase]

    def pick(key: str) -> Any:
        """feedback.ground_truth.<key> where set (training only), else the env's default."""
        if phase == "train" and gt[key] is not None:
            return gt[key]
        return env_defaults[key]

    if phase == "train":
        never_terminate = bool(pick("never_terminate"))
    elif legacy.oracle_stop:
        never_terminate = bool(env_defaults["never_terminate_ref"])
    else:
        never_terminate = True
    return GroundTruthFeedback(
        GroundTruthSettings(
            completion_reward=float(gt["completion_reward"]),
            per_fact_reward=float(gt["per_fact_reward"]),
            penalize_extra_steps=bool(pick("penalize_extra_steps")),
            never_terminate=never_terminate,
            reward_timing=str(gt["reward_timing"]),
            empty_gold="refuse" if phase == "train" else "zero",
        )
    )
