#!/usr/bin/env python
"""Table 2's retrieval columns (Fact F1 / EM) on the real HotpotQA / MuSiQue test questions, beside
the paper's rows (docs/DESIGN.md §10.4), from the run folders of experiments/table2/plan_train.txt
evaluated by experiments/table2/table2_evals.sh, or of experiments/table2b's plans (``--round table2b``).

    python experiments/table2/report_table2.py runs/table2 [--out experiments/table2/table2.md] [--seed 42]
    python experiments/table2/report_table2.py runs/table2b --round table2b    # experiments/table2b's plans
    scripts/make_results.sh table2      # the same from the committed records, experiments/table2/runs.tar.xz
    python experiments/table2/report_table2.py runs/table2b --round table2b --beam beam.md  # and round 12's beam table

Every cell is recomputed from the evaluation records (``pred_idx`` against ``sf_idx``) under both
protocols, each table beside the paper's numbers and the difference: the fixed budget T, and oracle
stopping (the episode cut where the gold set is complete, which the reference's test environment
did: the protocol of the paper's numbers, docs/DESIGN.md §9.2 and §10.4). A run folder belongs to a
setting by its name without underscores and seed: round 5's ``h_qrag_s1`` and table2b's
``w1_hqrag_s1`` are both setting ``hqrag``, seed 1. Each cell pools a setting's seeds over the test
questions all of them answered: the mean of the seeds' means, their sample std, and a 95 % bootstrap
interval that resamples seeds and, within them, questions (scripts/seed_report.py's ``boot_means``).
A cell whose files are missing shows "—".
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]
import numpy as np  # noqa: E402
from report_round import oracle_prefix  # noqa: E402
from seed_report import BOOT, boot_means, interval  # noqa: E402

from prompts_and_metrics.metrics import fact_metrics  # noqa: E402

DASH = "—"
# A file is a tuple of names, the first present is read. The evaluation names a file by its settings
# (rl/run/eval_records.py eval_stem): MuSiQue on a HotpotQA run at T = 4 is eval_seed42_musique_T4;
# the round-5 records (experiments/table2/runs.tar.xz) predate those suffixes and keep the bare names.
GREEDY, BEAM = ("eval_seed{seed}.jsonl",), ("eval_seed{seed}_beam4x3.jsonl",)
MSQ_GREEDY = ("ood_musique/eval_seed{seed}_musique_T4.jsonl", "ood_musique/eval_seed{seed}.jsonl")
MSQ_BEAM = ("ood_musique/eval_seed{seed}_musique_T4_beam4x3.jsonl", "ood_musique/eval_seed{seed}_beam4x3.jsonl")
# (method, setting, HotpotQA file, MuSiQue file, paper (HQA F1, EM, MSQ F1, EM) or None)
ROWS = [
    ("multi-step RAG w/o FT (untrained MiniLM)", "hnoft", GREEDY, MSQ_GREEDY, (0.73, 0.54, 0.51, 0.30)),
    ("**Q-RAG** (real HotpotQA training questions)", "hqrag", GREEDY, MSQ_GREEDY, (0.93, 0.89, 0.71, 0.55)),
    ("Plan Q-RAG (beam 4 × 3)", "hqrag", BEAM, MSQ_BEAM, (0.95, 0.91, 0.69, 0.53)),
    ("Q-RAG trained on the GENERATED stand-ins", "hgen", ("real_test/" + GREEDY[0],), MSQ_GREEDY, None),
    ("Plan Q-RAG w/o FT (beam 4 × 3)", "hnoft", BEAM, MSQ_BEAM, None),
]  # fmt: skip
TRAINED = ("hqrag", "hgen", "mqrag")  # the settings whose beam validation runs choose the path score (--beam)
IN_DOMAIN = ("Q-RAG trained on MuSiQue (in domain; paper Table 7: 0.81 / 0.72, Plan 0.84 / 0.76)", "mqrag")
CURVE = [("hn100", "100"), ("hn250", "250"), ("hqrag", "all")]  # settings, training questions (train_samples)
RUN = re.compile(r"^(?:w\d+_)?(?P<setting>.+?)(?:_s(?P<seed>\d+))?$")  # [w<wave>_]<setting>[_s<seed>]
METRICS = ("fact_em", "fact_f1", "oracle_em", "oracle_f1")
# What each round trained on and how it ran (the text around the tables).
ROUNDS = {
    "table2": {
        "plans": "experiments/table2/plan_train.txt",
        "archive": "committed in experiments/table2/runs.tar.xz: `scripts/make_results.sh table2` rebuilds this file",
        "evals": "experiments/table2/table2_evals.sh",
        "train": "485 HotpotQA, IRCoT's dev sample",
        "all": "485",  # its runs predate summary.json's train_samples
    },
    "table2b": {
        "plans": "experiments/table2b/{rows,curve,noft}_train.txt",
        "archive": "committed in experiments/table2b/runs.tar.xz: `scripts/make_results.sh table2b` rebuilds this file",
        "evals": "experiments/table2b/*_eval.txt",
        "train": "733 HotpotQA of the shipped real subset, selected on its 100 validation questions",
    },
}


def settings_of(runs_dir: Path) -> dict[str, list[Path]]:
    """{setting: its run folders, by seed}: every folder in ``runs_dir`` but the launchers' logs/."""
    out: dict[str, list[tuple[int, Path]]] = {}
    for run in sorted(p for p in runs_dir.iterdir() if p.is_dir() and p.name != "logs"):
        m = RUN.match(run.name)
        out.setdefault(m["setting"].replace("_", ""), []).append((int(m["seed"] or 0), run))
    return {k: [r for _, r in sorted(v)] for k, v in out.items()}


def find(run: Path, names: tuple[str, ...], seed: int) -> Path | None:
    """The first of a file's names present in the run folder, plain or gzipped (as the older runs.tgz
    archives hold the records); None if none is."""
    for name in names:
        path = run / name.format(seed=seed)
        for p in (path, path.with_name(path.name + ".gz")):
            if p.is_file():
                return p
    return None


def score(path: Path | None) -> dict[str, tuple[float, float, float, float]] | None:
    """{question id: (fact EM, fact F1, oracle-stop EM, oracle-stop F1)} of the records with known
    gold (unknown gold is unscored, as in the evaluation's own summary); None if absent or empty."""
    if path is None:
        return None
    out = {}
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if not r.get("sf_idx"):
                continue
            m = fact_metrics(r["pred_idx"], r["sf_idx"])
            o = fact_metrics(oracle_prefix(r["pred_idx"], r["sf_idx"]), r["sf_idx"])
            out[str(r["id"])] = (m["em"], m["f1"], o["em"], o["f1"])
    return out or None


def pool(found: list[dict[str, tuple[float, ...]]]) -> dict[str, Any] | None:
    """One cell over seeds (``found``: each seed's per-question scores) on the questions all of them
    answered: per metric the mean of the seeds' means, their sample std (None for one seed) and a
    95 % bootstrap interval over seeds and questions; None without a seed."""
    if not found:
        return None
    qs = sorted(set.intersection(*(set(f) for f in found)))
    if not qs:
        return None
    out: dict[str, Any] = {"n": len(qs), "seeds": len(found), "questions": qs, "matrix": {}}
    for k, key in enumerate(METRICS):
        m = np.array([[f[q][k] for q in qs] for f in found])  # seeds x questions
        means = m.mean(axis=1)
        out["matrix"][key] = m
        out[key] = {
            "mean": float(means.mean()),
            "std": float(means.std(ddof=1)) if len(found) > 1 else None,
            "ci95": bootstrap(m),
        }
    return out


def draws(m: np.ndarray) -> np.ndarray:
    """4000 bootstrap means of a seeds x questions matrix (seed_report.boot_means; a fixed generator,
    so the same records give the same bytes); the question draws are shared by any two matrices
    of the same size, which pairs a difference over questions."""
    rng = np.random.default_rng(0)
    q_idx = rng.integers(0, m.shape[1], size=(BOOT, m.shape[1]))
    return boot_means(m, rng, q_idx)


def difference(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str) -> str:
    """``a − b`` of two cells' means on the questions both answered, with its 95 % bootstrap interval:
    the same question draws for both (paired over questions), seeds drawn apart (as
    scripts/seed_report.py compares settings); a dash where either is missing."""
    if a is None or b is None:
        return DASH
    qs = sorted(set(a["questions"]) & set(b["questions"]))
    if not qs:
        return DASH
    ma, mb = ([c["questions"].index(q) for q in qs] for c in (a, b))
    ma, mb = a["matrix"][key][:, ma], b["matrix"][key][:, mb]
    rng = np.random.default_rng(0)
    q_idx = rng.integers(0, len(qs), size=(BOOT, len(qs)))
    lo, hi = interval(100.0 * (boot_means(ma, rng, q_idx) - boot_means(mb, rng, q_idx)))
    return f"{ma.mean() - mb.mean():+.3f} [{lo / 100:+.3f}, {hi / 100:+.3f}]"


def bootstrap(m: np.ndarray) -> tuple[float, float]:
    """The 95 % interval of :func:`draws` (seed_report.interval works in points x100)."""
    lo, hi = interval(100.0 * draws(m))
    return lo / 100.0, hi / 100.0


def cell(c: dict[str, Any] | None, key: str) -> str:
    """``mean [lo, hi]`` for one seed, ``mean ± std [lo, hi]`` for several; a dash without records."""
    if c is None:
        return DASH
    s = c[key]
    std = "" if s["std"] is None else f" ± {s['std']:.3f}"
    return f"{s['mean']:.3f}{std} [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]"


def scores_of(runs: dict[str, list[Path]], setting: str, names: tuple[str, ...], seed: int) -> dict[str, Any] | None:
    found = [score(find(r, names, seed)) for r in runs.get(setting, [])]
    return pool([f for f in found if f is not None])


def n_of(c: dict[str, Any] | None) -> str:
    """The questions of a cell, and the seeds where more than one."""
    if c is None:
        return DASH
    return f"{c['n']}" + (f" × {c['seeds']}" if c["seeds"] > 1 else "")


def paper(v: float | None) -> str:
    return DASH if v is None else f"{v:.2f}"


def delta(c: dict[str, Any] | None, key: str, ref: float | None) -> str:
    """The seeds' mean minus the paper's number (signed), or a dash where either is missing."""
    if c is None or ref is None:
        return DASH
    return f"{c[key]['mean'] - ref:+.3f}"


def protocol_table(runs: dict[str, list[Path]], seed: int, tag: str) -> list[str]:
    """Table 2's rows under one protocol (``tag``: "fact" = fixed budget, "oracle" = oracle stopping),
    the paper's F1 / EM and our difference to them beside each dataset."""
    out = [
        "| method | HQA fact F1 | HQA fact EM | n (× seeds) | paper HQA F1 / EM | Δ F1 / EM | MSQ fact F1 | MSQ fact EM "
        "| n (× seeds) | paper MSQ F1 / EM | Δ F1 / EM |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    f1, em = f"{tag}_f1", f"{tag}_em"
    for name, setting, hqa, msq, ref in ROWS:
        h, m = scores_of(runs, setting, hqa, seed), scores_of(runs, setting, msq, seed)
        ref = ref or (None,) * 4
        out.append(
            f"| {name} | {cell(h, f1)} | {cell(h, em)} | {n_of(h)} | {paper(ref[0])} / {paper(ref[1])} "
            f"| {delta(h, f1, ref[0])} / {delta(h, em, ref[1])} "
            f"| {cell(m, f1)} | {cell(m, em)} | {n_of(m)} | {paper(ref[2])} / {paper(ref[3])} "
            f"| {delta(m, f1, ref[2])} / {delta(m, em, ref[3])} |"
        )
    return out


def trained_steps(run: Path) -> str:
    """The optimiser steps a run was planned for (its config.yaml's steps_count), as the text names them."""
    cfg = run / "config.yaml"
    m = re.search(r"^steps_count: (\d+)$", cfg.read_text(), re.M) if cfg.is_file() else None
    return f"{int(m.group(1)):,}".replace(",", " ") if m else "(unknown: no run folder)"


def curve_size(runs: list[Path], label: str) -> str:
    """The training questions of a curve point: what its runs' summary.json say they trained on
    (``train_samples``, written since table2b), else the plan's label."""
    sizes = set()
    for run in runs:
        f = run / "summary.json"
        sizes.add(json.loads(f.read_text()).get("train_samples") if f.is_file() else None)
    return str(sizes.pop()) if len(sizes) == 1 and None not in sizes else label


def build(runs_dir: Path, seed: int, round_name: str = "table2") -> str:
    rnd = ROUNDS[round_name]
    runs = settings_of(runs_dir)
    out = [
        "# Table 2 (retrieval columns) on real HotpotQA / MuSiQue questions",
        "",
        f"Made by experiments/table2/report_table2.py from the run folders of {rnd['plans']}",
        f"({rnd['archive']}),",
        f"evaluated by {rnd['evals']} (seed {seed}, best checkpoint, every test question).",
        "",
        "HotpotQA: the 300 real test questions (T = 2). MuSiQue: the 200 real test questions, out of domain",
        "(the HotpotQA-trained retriever, T = 4). Fact F1 / EM (EM: every gold paragraph retrieved, extras",
        "allowed; prompts_and_metrics/metrics.py) under two protocols, each beside the paper's Table 2 and",
        "the difference (ours − paper): the fixed budget T, what a retriever without an oracle returns, and",
        "oracle stopping, each episode cut where its gold set is complete. The paper's numbers were measured",
        "with oracle stopping (DESIGN §9.2, §10.4: the reference's HotpotQA / MuSiQue test environments",
        "stopped on ground truth), so the second table is the like-for-like comparison. The cut keeps",
        "every gold paragraph found, so EM is the same under both; F1 can only rise, and at HotpotQA's T = 2",
        "it rises only where the first pick holds every gold paragraph.",
        "",
        "Each cell: the mean over a method's trained seeds (± their sample std where there are several) and",
        f"[a 95 % bootstrap interval] resampling seeds and, within them, the test questions ({BOOT} draws);",
        "n: the test questions every seed answered (× the seeds). With one run (w/o FT: the untrained",
        "encoder draws no weight) the interval is over questions alone.",
        "",
        "### Fixed budget T",
        "",
        *protocol_table(runs, seed, "fact"),
        "",
        "### Oracle stopping (the paper's protocol)",
        "",
        *protocol_table(runs, seed, "oracle"),
        "",
        "2WikiMultihopQA: the paper's result tables (as docs/DESIGN.md §10 transcribes them) hold no 2Wiki",
        "number to set beside a 2Wiki row, and this round evaluated no 2Wiki questions: no 2Wiki rows.",
    ]
    name, setting = IN_DOMAIN
    m = scores_of(runs, setting, GREEDY, seed)
    mb = scores_of(runs, setting, BEAM, seed)
    out += [
        "",
        f"{name}: fact F1 / EM {cell(m, 'fact_f1')} / {cell(m, 'fact_em')} at the fixed budget, "
        f"{cell(m, 'oracle_f1')} / {cell(m, 'oracle_em')} with oracle stopping (n {n_of(m)}); Plan Q-RAG "
        f"{cell(mb, 'fact_f1')} / {cell(mb, 'fact_em')} and {cell(mb, 'oracle_f1')} / {cell(mb, 'oracle_em')}.",
        "",
        "Learning curve over training-set size (HotpotQA test, greedy; Δ: against all the training questions,",
        "the interval paired over questions):",
        "",
        "| training questions | fact F1 | fact EM | n (× seeds) | Δ F1 vs all | Δ EM vs all |",
        "|---|---|---|---|---|---|",
    ]
    full = scores_of(runs, CURVE[-1][0], GREEDY, seed)
    for setting, label in CURVE:
        c = scores_of(runs, setting, GREEDY, seed)
        d = [DASH, DASH] if setting == CURVE[-1][0] else [difference(c, full, k) for k in ("fact_f1", "fact_em")]
        size = curve_size(runs.get(setting, []), rnd.get(label, label))
        out.append(f"| {size} | {cell(c, 'fact_f1')} | {cell(c, 'fact_em')} | {n_of(c)} | {d[0]} | {d[1]} |")
    base = scores_of(runs, "hnoft", GREEDY, seed)
    if full and base:
        gain = full["fact_f1"]["mean"] - base["fact_f1"]["mean"]
        verdict = "met" if gain >= 0.10 else "not met"
        out += [
            "",
            f"Target (trained Q-RAG beats w/o FT by ≥ 0.10 HotpotQA fact F1): {difference(full, base, 'fact_f1')}, "
            f"{verdict}.",
        ]
    first = runs.get("hqrag", [runs_dir / "hqrag"])[0]
    out += [
        "",
        "What differs from the paper: the encoder (all-MiniLM-L6-v2, 22 M parameters, vs multilingual-e5-large);",
        f"hundreds of training questions ({rnd['train']}) instead of ~90 000, and {trained_steps(first)} optimiser",
        "steps of batch 64 instead of 10 000 of batch 96; the test questions are 300 / 200 real ones (HotpotQA:",
        "200 dev `hard` + 100 from the train split; MuSiQue: 200 from the dev and train splits), not the full dev",
        "sets; gold is paragraph-level (the project's fact metrics always are; the HotpotQA training questions",
        "carry only paragraph-level `is_supporting`). No reader columns (answer F1 / EM): this table is retrieval only.",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="folder holding the plan's run folders")
    ap.add_argument("--out", type=Path, help="write the markdown here (default: print it)")
    ap.add_argument("--seed", type=int, default=42, help="evaluation seed (default 42)")
    ap.add_argument("--round", choices=sorted(ROUNDS), default="table2", help="whose plans made the runs (the text)")
    ap.add_argument(
        "--beam",
        type=Path,
        help="also write experiments/table2/beam_report.py's table here: the beam's path score chosen on the runs' "
        "beam_val/, against greedy on beam_test/ and beam_ood_musique/ (round 12)",
    )
    args = ap.parse_args(argv)
    if not args.runs.is_dir():
        ap.error(f"no folder {args.runs}")
    text = build(args.runs, args.seed, args.round)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    if args.beam:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import beam_report  # here: it imports this module

        try:
            rnd = ROUNDS[args.round]  # not args.runs: make_results.sh unpacks the archive into a temporary folder
            rep, beam = beam_report.build(
                args.runs, source=f"the run folders of {rnd['plans']} ({rnd['archive']})", choose_on=TRAINED
            )
        except beam_report.BeamReportError as e:
            sys.exit(f"error: --beam: {e}")
        args.beam.write_text(beam, encoding="utf-8")
        print(f"wrote {args.beam}: path score `{rep['chosen']}` chosen on validation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
