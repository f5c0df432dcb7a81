#!/usr/bin/env python
"""Every beam path score (``eval.beam_score``, rl/eval/beam.py PATH_SCORES) from ONE beam evaluation.

    python experiments/table2/beam_path_scores.py pretrained_path=runs/<run> [eval_retriever.py overrides ...]

Runs ``eval_retriever.py``'s evaluation with ``eval.planner=beam`` (score ``last``, written to its
usual file) while each sample's Q-function rows are cached by the selection they were computed for;
the planner is then run again with every other score on the cached rows (a row no earlier run asked
for is computed then), so each score's path is exactly what ``eval.beam_score=<score>`` returns,
for the cost of one evaluation when T = 2 (every score then needs the same rows). Writes
``<eval file stem>.path_scores.json`` next to the evaluation file: per score, fact EM / F1 over the
samples (paragraph-level, ``prompts_and_metrics.metrics.fact_metrics``), how many samples' paths
differ from ``last``'s, and every sample's path per score. Starts the evaluation file afresh
(``overwrite=true``): the cached rows exist only for the samples evaluated in this process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import mean

import torch
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import rl.eval.beam as beam  # noqa: E402
from prompts_and_metrics.metrics import fact_metrics  # noqa: E402
from rl.run.evaluate import run  # noqa: E402

SCORES = tuple(beam.PATH_SCORES)


def main(argv: list[str]) -> dict:
    paths: list[dict[str, list[int]]] = []  # per sample, in evaluation order: score -> chunks picked
    plain_search = beam.beam_search

    def recording_search(q_fn, n_chunks, max_steps, width, expand, score="last"):
        rows: dict[tuple[int, ...], torch.Tensor] = {}

        def cached(selections: Sequence[Sequence[int]]) -> torch.Tensor:
            todo = [list(s) for s in selections if tuple(s) not in rows]
            if todo:
                for s, row in zip(todo, q_fn(todo)):
                    rows[tuple(s)] = row
            return torch.stack([rows[tuple(s)] for s in selections])

        found = {s: plain_search(cached, n_chunks, max_steps, width, expand, s) for s in SCORES}
        paths.append({s: b.selected for s, b in found.items()})
        return found[score]

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="testing", overrides=[*argv, "eval.planner=beam", "overwrite=true"])
    beam.beam_search = recording_search  # what beam_episodes calls
    try:
        summary = run(cfg)
    finally:
        beam.beam_search = plain_search
    out_dir = Path(cfg.output_dir or cfg.pretrained_path)
    stem = Path(summary["file"]).stem
    records = [json.loads(x) for x in (out_dir / f"{stem}.jsonl").read_text(encoding="utf-8").splitlines()]
    records.sort(key=lambda r: r["index"])  # the evaluation's order: indices ascending
    if len(records) != len(paths):
        raise SystemExit(f"error: {len(records)} records but {len(paths)} planner runs")
    for p, r in zip(paths, records):  # the file's picks are the `last` path's (the env may stop it early)
        assert r["pred_idx"] == p["last"][: len(r["pred_idx"])], (r["index"], r["pred_idx"], p["last"])
    result: dict = {"file": str(out_dir / f"{stem}.jsonl"), "n": len(records), "scores": {}, "paths": {}}
    for s in SCORES:
        facts = [fact_metrics(p[s], r["sf_idx"]) for p, r in zip(paths, records)]
        result["scores"][s] = {
            "fact_em": mean(f["em"] for f in facts),
            "fact_f1": mean(f["f1"] for f in facts),
            "differs_from_last": sum(p[s] != p["last"] for p in paths),
        }
        result["paths"][s] = [p[s] for p in paths]  # per sample, in the file's index order
    (out_dir / f"{stem}.path_scores.json").write_text(json.dumps(result) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "paths"}, indent=2))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
