"""Greedy evaluation episodes (DESIGN §4.3, §9.1) and their per-sample records.

Test episodes never stop on ground truth (the feedback built for phase 'test' never terminates
unless ``legacy.oracle_stop``); they end at ``max_steps``, when no chunk is left, or, with
``stop_q_threshold`` set, before a step t > 0 whose best Q is ≤ the threshold. Only the online
action encoder embeds chunks (no target pass, DESIGN §3.4), once per sample, in bounded slices;
samples that hold the same chunk list (one text asked many questions) share one tokenisation and
one embedding of it (``QNetwork.prepare(..., share=True)``) within a group and from one group to the next.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from envs.env import Episode, VecRetrievalEnv
from envs.feedback import Feedback
from prompts_and_metrics.metrics import sample_fact_metrics
from rl.model.qnetwork import QNetwork


@dataclass
class EvalSettings:
    max_steps: int
    stop_q_threshold: float | None  # None: the fixed budget of max_steps
    group_size: int  # samples stepped together (state encodings batched across them)


def eval_env(qnet: QNetwork, dataset: Any, feedback: Feedback, settings: EvalSettings, n_envs: int) -> VecRetrievalEnv:
    """The environments evaluation runs its episodes in (greedy and beam), seeded alike (seed 0)."""
    return VecRetrievalEnv(
        dataset,
        feedback,
        n_envs,
        settings.max_steps,
        qnet.positions,  # the network's own (bound when it was built)
        qnet.inputs.sort_by_index,
        qnet.device,
        seed=0,
        name="eval",
    )


@torch.no_grad()
def greedy_episodes(
    qnet: QNetwork,
    dataset: Any,
    indices: Sequence[int],
    feedback: Feedback,
    settings: EvalSettings,
) -> Iterator[dict[str, Any]]:
    """Yield one record per sample index, in order."""
    group = max(1, settings.group_size)
    env = eval_env(qnet, dataset, feedback, settings, group)
    _held: list[Any] = []  # kept, not read: the previous group's haystacks, alive while the next group joins them
    for start in range(0, len(indices), group):
        t0 = time.perf_counter()
        chunk = list(indices[start : start + group])
        episodes = [env.start(slot, int(i)) for slot, i in enumerate(chunk)]
        # the samples enter: tokenised (a haystack shared by several, once) and their chunks embedded
        _held = qnet.prepare(episodes, share=True, embed=True)
        q_log: list[list[float]] = [[] for _ in episodes]
        active = list(range(len(episodes)))
        while active:
            q_rows = qnet.q_values([episodes[s] for s in active], train=False, evaluation=True)
            acting, actions = [], []
            for row, s in enumerate(active):
                ep = episodes[s]
                q = q_rows[row].masked_fill(~ep.available, float("-inf"))
                a = int(torch.argmax(q))
                qa = float(q[a])
                if settings.stop_q_threshold is not None and ep.t > 0 and qa <= settings.stop_q_threshold:
                    continue  # the Q-value stopping rule ends this episode before step t
                q_log[s].append(qa)
                acting.append(s)
                actions.append(a)
            if not acting:
                break
            _, dones, _ = env.step(acting, actions)
            active = [s for s, d in zip(acting, dones) if not d]
        per_episode = (time.perf_counter() - t0) / len(episodes)
        for s, ep in enumerate(episodes):
            yield _record(ep, q_log[s], qnet.inputs.text_length(ep), per_episode)


def _record(ep: Episode, q_values: list[float], text_len: int, seconds: float) -> dict[str, Any]:
    s = ep.sample
    chunks = s["chunks"]
    scores = sample_fact_metrics(ep.selected, s)  # null for unknown gold, never EM 1.0
    rec: dict[str, Any] = {
        "id": s["id"],
        "question": s["question"],
        "answer": s["answer"],
        "sf_idx": list(s["sf_idx"]),
        "pred_idx": list(ep.selected),
        "q_values": q_values,
        "sf_texts": [chunks[j] for j in s["sf_idx"]],
        "pred_texts": [chunks[j] for j in ep.selected],
        "return": ep.ret,
        "text_len": text_len,
        "f1": None if scores is None else scores["f1"],
        "em": None if scores is None else scores["em"],
        "precision": None if scores is None else scores["precision"],
        "recall": None if scores is None else scores["recall"],
        "steps": ep.t,
        "episode_s": seconds,
    }
    # num_tokens: the haystack's length under the loader's length tokenizer (BabiLong, NIAH);
    # sf_partial / sf_missing: gold paragraphs missing from the context (HotpotQA fullwiki)
    for key in (
        "answer_aliases",
        "source",
        "num_sentences",
        "num_tokens",
        "split",
        "sf_partial",
        "sf_missing",
        "answerable",
        "ruler_index",
        "longbench",
    ):
        if key in s:
            rec[key] = s[key]
    return rec


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over records; fact metrics over samples whose gold is known (null if none).
    ``n_gold_known`` counts the samples behind the fact metrics, ``n_sf_partial`` those among
    them whose gold was only partly in the context (flagged by the loader)."""
    n = len(records)

    def mean(key: str) -> float | None:
        vals = [r[key] for r in records if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    rets = [r["return"] for r in records]
    mu = sum(rets) / n if n else 0.0
    std = math.sqrt(sum((x - mu) ** 2 for x in rets) / n) if n else 0.0
    return {
        "n": n,
        "return": mu,
        "return_std": std,
        "fact_em": mean("em"),
        "fact_f1": mean("f1"),
        "n_gold_known": sum(r.get("em") is not None for r in records),
        "n_sf_partial": sum(bool(r.get("sf_partial")) for r in records),
        "mean_text_len": mean("text_len"),
        "mean_num_tokens": mean("num_tokens"),
        "mean_steps": mean("steps"),
        "episode_s_mean": mean("episode_s"),
    }
