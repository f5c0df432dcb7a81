"""The beam planner's path score (``eval.beam_score``, rl/eval/beam.py PATH_SCORES): on a hand-built
Q tree each score returns the path it should, and with no pruning the beam returns exactly the
brute-force best path of every score; the config key is checked and names its files."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

import rl.eval.beam as beam_module
from rl.eval.beam import PATH_SCORES, beam_search
from rl.run.eval_config import merge_eval_config
from rl.run.eval_records import eval_stem
from rl.run.evaluate import run
from rl.run.validate import BEAM_SCORES, ConfigError, check_eval

from .conftest import eval_cfg

# 6 chunks, T = 2, Q of every chunk in the state holding each prefix (0.0 = uninteresting). The four
# root children 0-3 lead to four paths, each the best of one score:
#   (0, 1) Q [0.9, 0.3]   first (greedy: the best first step, then the best second)
#   (1, 4) Q [0.8, 0.75]  min  0.75
#   (2, 5) Q [0.5, 1.35]  sum  1.85 (mean 0.925)
#   (3, 4) Q [0.2, 1.4]   last 1.4: the "overestimated" final step the reference's rule trusts
TREE = {
    (): [0.9, 0.8, 0.5, 0.2, 0.0, 0.0],
    (0,): [0.0, 0.3, 0.0, 0.0, 0.0, 0.0],
    (1,): [0.0, 0.0, 0.0, 0.0, 0.75, 0.0],
    (2,): [0.0, 0.0, 0.0, 0.0, 0.0, 1.35],
    (3,): [0.0, 0.0, 0.0, 0.0, 1.4, 0.0],
}
EXPECTED = {"first": [0, 1], "min": [1, 4], "sum": [2, 5], "mean": [2, 5], "last": [3, 4]}


def table_fn(table: dict[tuple[int, ...], list[float]]):
    def q_fn(selections: Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.tensor([table[tuple(s)] for s in selections])

    return q_fn


def brute_force(table: dict[tuple[int, ...], list[float]], n: int, steps: int, score: str) -> list[int]:
    """The best of every path of ``steps`` distinct chunks by ``score``, ties as the planner breaks
    them (higher last Q, then the lexicographically smaller path)."""

    def key(path: tuple[int, ...]) -> tuple:
        q = [table[path[:t]][a] for t, a in enumerate(path)]
        return (-PATH_SCORES[score](q), -q[-1], path)

    return list(min(itertools.permutations(range(n), steps), key=key))


@pytest.mark.parametrize("score", sorted(EXPECTED))
def test_each_score_picks_its_path_on_the_hand_built_tree(score: str) -> None:
    best = beam_search(table_fn(TREE), 6, 2, width=4, expand=4, score=score)
    assert best.selected == EXPECTED[score]
    assert best.q_values == pytest.approx([TREE[tuple(best.selected[:t])][a] for t, a in enumerate(best.selected)])
    # every path of the tree was a candidate: the brute force over all 30 paths agrees
    full = {p: TREE.get(p, [0.0] * 6) for p in [(), *((a,) for a in range(6))]}
    assert best.selected == brute_force(full, 6, 2, score)


def test_the_default_is_the_reference_rule() -> None:
    assert beam_search(table_fn(TREE), 6, 2, width=4, expand=4).selected == EXPECTED["last"]


def random_tree(rng: random.Random, n: int, steps: int) -> dict[tuple[int, ...], list[float]]:
    """Q for every prefix of up to steps - 1 distinct chunks. Unrounded: the only ties are the
    ones a score makes itself (``first``, ``min``), broken alike by the planner and the brute force
    (the planner's other tie rules are tests/eval/test_planner.py's)."""
    prefixes = [p for k in range(steps) for p in itertools.permutations(range(n), k)]
    return {p: [rng.uniform(-1, 2) for _ in range(n)] for p in prefixes}


@pytest.mark.parametrize("score", sorted(PATH_SCORES))
def test_without_pruning_the_beam_is_the_brute_force_best(score: str) -> None:
    rng = random.Random(score)
    for _ in range(40):
        n, steps = rng.randint(2, 5), rng.randint(1, 3)
        steps = min(steps, n)
        tree = random_tree(rng, n, steps)
        best = beam_search(table_fn(tree), n, steps, width=10**4, expand=n, score=score)
        assert best.selected == brute_force(tree, n, steps, score)


def test_sum_and_mean_pick_the_same_paths_and_width_one_is_greedy() -> None:
    rng = random.Random(7)
    for _ in range(40):
        tree = random_tree(rng, 5, 3)
        sums = beam_search(table_fn(tree), 5, 3, width=2, expand=2, score="sum")
        assert beam_search(table_fn(tree), 5, 3, width=2, expand=2, score="mean").selected == sums.selected
        greedy = beam_search(table_fn(tree), 5, 3, width=1, expand=1)
        for score in PATH_SCORES:
            assert beam_search(table_fn(tree), 5, 3, width=1, expand=1, score=score).selected == greedy.selected


def test_an_unknown_score_is_refused() -> None:
    with pytest.raises(ValueError, match="eval.beam_score must be one of last, sum, mean, first, min, got 'max'"):
        beam_search(table_fn(TREE), 6, 2, width=4, expand=4, score="max")


def test_config_key_is_checked_and_names_the_file(config_run: Path) -> None:
    assert BEAM_SCORES == tuple(PATH_SCORES)
    with pytest.raises(ConfigError) as e:
        check_eval(merge_eval_config(eval_cfg(config_run, "eval.planner=beam", "eval.beam_score=max")))
    assert e.value.lines == ["eval.beam_score='max': expected one of last, sum, mean, first, min"]
    last = merge_eval_config(eval_cfg(config_run, "eval.planner=beam"))
    assert last.eval.beam_score == "last"
    assert eval_stem(last) == "eval_seed42_nt1000_beam4x3"  # the files made before the key resume
    summed = merge_eval_config(eval_cfg(config_run, "eval.planner=beam", "eval.beam_score=sum"))
    check_eval(summed)
    assert eval_stem(summed) == "eval_seed42_nt1000_beam4x3_sum"
    greedy = merge_eval_config(eval_cfg(config_run, "eval.beam_score=sum"))
    assert eval_stem(greedy) == "eval_seed42_nt1000"  # greedy ignores the beam's keys


def test_the_evaluation_uses_the_configured_score(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eval_retriever's run(cfg) on the tiny untrained agent, T = 2: the key reaches the planner, and
    as every score sees the same 9 two-step candidates (the root's best 3, each expanded by 3), the
    sum-scored path's Q sum is at least the last-scored one's, and the last-scored path's final Q at
    least the sum-scored one's."""
    used: list[str] = []

    def spy(*args, **kwargs):
        used.append(args[5])
        return beam_search(*args, **kwargs)

    monkeypatch.setattr(beam_module, "beam_search", spy)

    def go(*overrides: str) -> list[dict]:
        out = tmp_path / "eval_seed42_ns12_beam4x3"
        run(eval_cfg(tiny_run, f"output_dir={tmp_path}", "envs.num_sentences=12", "num_samples=4", *overrides))
        suffix = "".join(f"_{o.split('=')[1]}" for o in overrides if o.startswith("eval.beam_score"))
        return [json.loads(x) for x in Path(f"{out}{suffix}.jsonl").read_text(encoding="utf-8").splitlines()]

    last = go("eval.planner=beam")
    summed = go("eval.planner=beam", "eval.beam_score=sum")
    assert len(last) == len(summed) == 4 and used == ["last"] * 4 + ["sum"] * 4
    for a, b in zip(last, summed):
        assert sum(b["q_values"]) >= sum(a["q_values"]) - 1e-6
        assert a["q_values"][-1] >= b["q_values"][-1] - 1e-6


def test_one_evaluation_gives_every_score_as_its_own_evaluation_would(tiny_run: Path, tmp_path: Path) -> None:
    """experiments/table2/beam_path_scores.py (every score from one beam evaluation, on cached Q rows) picks,
    per sample and score, the path that ``eval.beam_score=<score>`` picks; T = 3, so ``sum`` and
    ``min`` prune differently from ``last`` and ask for rows of their own."""
    from tests.conftest import load_script

    common = [f"pretrained_path={tiny_run}", "envs.num_sentences=12", "num_samples=4", "envs.max_steps=3"]
    common += ["progress_bar=false", "device=cpu"]
    result = load_script("beam_path_scores", "experiments/table2").main([*common, f"output_dir={tmp_path / 'all'}"])
    assert result["n"] == 4 and set(result["scores"]) == set(PATH_SCORES)
    for score in PATH_SCORES:
        run(
            eval_cfg(
                tiny_run, f"output_dir={tmp_path / score}", *common[1:], f"eval.beam_score={score}", "eval.planner=beam"
            )
        )
        (own,) = (tmp_path / score).glob("*.jsonl")
        picks = [json.loads(x)["pred_idx"] for x in own.read_text(encoding="utf-8").splitlines()]
        assert picks == result["paths"][score], score
