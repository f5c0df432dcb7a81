"""Does the SFT baseline learn? (DESIGN §4.5; experiments/round5/sft_probe.md cites its output.)

Trains ``learner=sft`` for a few optimiser steps (CPU is enough) and reports at step 0 and every
``--every`` steps, one JSON line each:

* on a fixed set of training samples, teacher-forced, encoders in eval mode: the gold chunk's mean
  rank among a hop's available chunks (1 = the greedy pick), the share of hops whose greedy pick is
  gold (first hop and later hops apart), and the logits' distribution: mean Q of the gold chunk,
  mean Q of the other chunks, mean standard deviation of Q over a hop's chunks;
* the learner's training scalars averaged over the steps since the last line (``hops_trained``:
  the share of teacher-forced hops that entered the loss);
* validation fact EM and F1 (greedy, the trainer's fixed in-training evaluation subset).

Usage: python experiments/round5/sft_probe.py --steps 150 --every 25 --probe 24 --out probe.jsonl -- <overrides>
(the overrides compose configs/training.yaml; ``learner=sft`` is added).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
from omegaconf import open_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rl.learners.sft import SFTLearner, gold_ranks  # noqa: E402
from rl.run.config import compose_config  # noqa: E402
from rl.run.train import Trainer  # noqa: E402


@torch.no_grad()
def probe(learner: SFTLearner, episodes: list) -> dict[str, float]:
    """Teacher-forced ranks and logit statistics on ``episodes`` (eval mode, no gradient)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for logits, target in learner.group_logits(episodes, train=False):
        ranks = gold_ranks(logits, target).float()
        avail = torch.isfinite(logits)
        gold_q = logits.gather(1, target[:, None])[:, 0]
        others = avail.clone().scatter_(1, target[:, None], False)
        acc["gold_rank"] += ranks.tolist()
        acc["top1_hop1"].append(float(ranks[0] == 1))
        acc["top1_later"] += (ranks[1:] == 1).float().tolist()
        acc["candidates"] += avail.sum(1).float().tolist()
        acc["q_gold"] += gold_q.tolist()
        acc["q_others"] += [float(row[m].mean()) for row, m in zip(logits, others)]
        acc["q_std"] += [float(row[m].std()) for row, m in zip(logits, avail)]
    return {k: sum(v) / len(v) for k, v in acc.items() if v}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150, help="optimiser steps")
    ap.add_argument("--every", type=int, default=25, help="report every this many optimiser steps")
    ap.add_argument("--probe", type=int, default=24, help="fixed training samples whose ranks are measured")
    ap.add_argument("--out", type=Path, required=True, help="JSON lines written here")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    cfg = compose_config("training", ["learner=sft", *args.overrides])
    with tempfile.TemporaryDirectory() as tmp, open_dict(cfg):
        cfg.run_dir = str(Path(tmp) / "run")
        trainer = Trainer(cfg)
        learner: SFTLearner = trainer.learner
        probe_set = [learner.env.reset_random(0) for _ in range(args.probe)]  # drawn once, before training
        probe_set = [ep for ep in probe_set if learner.trajectory(ep)]
        trainer.qnet.prepare(probe_set)  # the probe's samples enter the network
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w") as f:
            scalars: dict[str, list[float]] = defaultdict(list)
            while True:
                step = learner.counters.optimizer_steps
                if step % args.every == 0:
                    val = trainer.in_training_eval()
                    row = {"step": step, "overrides": args.overrides if step == 0 else None}
                    row |= {f"probe/{k}": v for k, v in probe(learner, probe_set).items()}
                    row |= {f"train/{k}": sum(v) / len(v) for k, v in scalars.items()}
                    row |= {"val/fact_em": val["fact_em"], "val/fact_f1": val["fact_f1"]}
                    print(json.dumps(row), file=f, flush=True)
                    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
                    scalars.clear()
                if step >= args.steps:
                    break
                for k, v in learner.micro_step().items():
                    scalars[k].append(float(v))
        trainer.close()


if __name__ == "__main__":
    main()
