"""Q-threshold early-stopping analysis of a retriever log (paper App. B, Tables 5/6; DESIGN §9.3).

    python scripts/stopping_analysis.py runs/<run>/eval_seed42_ns50.jsonl [--out DIR]
        [--thresholds -0.1:1.1:0.1]

For every threshold θ (strict ``<``): the kept prefix ends before the first step t whose logged
``q_values[t] < θ`` (t = 0 included, so the kept length can be 0). Per threshold it reports
* ``mean_kept_len`` and fact EM / F1 of the kept prefix (over all episodes);
* over the episodes that ever hold all gold chunks (t_earliest = shortest prefix holding them):
  the fractions of ``early`` (t_stop < t_earliest), ``perfect`` (=) and ``late`` (>) stops and
  ``mean_earliest_len``;
* per-step TPR / FPR of the "continue" decision (q_values[t] ≥ θ) where the label of step t is
  "continue" iff t < t_earliest (gold still missing before step t).
The step-level ROC AUC of q_values as a continue score is threshold-free (printed once).
Writes ``<log stem>.stopping.csv`` and ``.stopping.md`` next to the log (or into ``--out``).
Answer metrics need a reader run per prefix and are not computed here.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS = (
    "threshold",
    "n",
    "mean_kept_len",
    "fact_em",
    "fact_f1",
    "n_completable",
    "mean_earliest_len",
    "early",
    "perfect",
    "late",
    "tpr_continue",
    "fpr_continue",
)


def load_records(path: Path) -> list[dict[str, Any]]:
    out = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}:{no}: not valid JSON ({e})") from None
        for key in ("pred_idx", "sf_idx", "q_values"):
            if key not in rec:
                raise SystemExit(f"{path}:{no}: record lacks {key!r} (expected an eval_retriever.py log)")
        out.append(rec)
    if not out:
        raise SystemExit(f"{path}: no records")
    return out


def fact_scores(pred: Sequence[int], gold: Sequence[int]) -> tuple[float, float]:
    """(fact EM, fact F1) as DESIGN §9.2 (both empty → 1)."""
    p, g = set(pred), set(gold)
    if not p and not g:
        return 1.0, 1.0
    hit = len(p & g)
    prec = hit / len(p) if p else 0.0
    rec = hit / len(g) if g else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
    return float(g <= p), f1


def earliest_complete(pred: Sequence[int], gold: Sequence[int]) -> int | None:
    need = set(gold)
    if not need:
        return 0
    held: set[int] = set()
    for k, a in enumerate(pred, 1):
        held.add(a)
        if need <= held:
            return k
    return None


def stop_length(q_values: Sequence[float], threshold: float) -> int:
    for t, q in enumerate(q_values):
        if q < threshold:
            return t
    return len(q_values)


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """P(score of a positive > score of a negative), ties counted ½ (Mann–Whitney)."""
    pos = sum(labels)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    rank_sum, i = 0.0, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        avg_rank = (i + j) / 2 + 1
        rank_sum += sum(avg_rank for k in range(i, j + 1) if labels[order[k]])
        i = j + 1
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def thresholds_from(spec: str) -> list[float]:
    lo, hi, step = (float(x) for x in spec.split(":"))
    n = int(round((hi - lo) / step))
    return [round(lo + k * step, 10) for k in range(n + 1)]


def analyse(records: list[dict[str, Any]], thresholds: Sequence[float]) -> tuple[list[dict[str, Any]], float | None]:
    steps: list[tuple[float, bool]] = []  # (q, should continue) for completable episodes
    earliest = []
    for r in records:
        te = earliest_complete(r["pred_idx"], r["sf_idx"])
        earliest.append(te)
        if te is not None:
            steps += [(float(q), t < te) for t, q in enumerate(r["q_values"])]
    auc = roc_auc([s for s, _ in steps], [y for _, y in steps])
    rows = []
    for th in thresholds:
        kept, ems, f1s = [], [], []
        early = perfect = late = 0
        for r, te in zip(records, earliest):
            ts = stop_length(r["q_values"], th)
            em, f1 = fact_scores(r["pred_idx"][:ts], r["sf_idx"])
            kept.append(ts)
            ems.append(em)
            f1s.append(f1)
            if te is not None:
                early += ts < te
                perfect += ts == te
                late += ts > te
        comp = [te for te in earliest if te is not None]
        pos = [q >= th for q, y in steps if y]
        neg = [q >= th for q, y in steps if not y]
        n = len(records)
        rows.append(
            {
                "threshold": th,
                "n": n,
                "mean_kept_len": sum(kept) / n,
                "fact_em": sum(ems) / n,
                "fact_f1": sum(f1s) / n,
                "n_completable": len(comp),
                "mean_earliest_len": sum(comp) / len(comp) if comp else None,
                "early": early / len(comp) if comp else None,
                "perfect": perfect / len(comp) if comp else None,
                "late": late / len(comp) if comp else None,
                "tpr_continue": sum(pos) / len(pos) if pos else None,
                "fpr_continue": sum(neg) / len(neg) if neg else None,
            }
        )
    return rows, auc


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def write_outputs(rows: list[dict[str, Any]], auc: float | None, log_path: Path, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = log_path.name[: -len(".jsonl")] if log_path.name.endswith(".jsonl") else log_path.stem
    csv_path, md_path = out_dir / f"{stem}.stopping.csv", out_dir / f"{stem}.stopping.md"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r[k] is None else r[k] for k in COLUMNS})
    lines = [
        f"# Q-threshold stopping: {log_path.name}",
        "",
        f"{rows[0]['n']} episodes, {rows[0]['n_completable']} ever hold all gold chunks; "
        f"step-level ROC AUC of q_values for 'continue': {_cell(auc)}",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(_cell(r[k]) for k in COLUMNS) + " |" for r in rows]
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return csv_path, md_path


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logfile", type=Path, help="an eval_retriever.py JSONL log")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: the log's folder)")
    ap.add_argument("--thresholds", default="-0.1:1.1:0.1", help="lo:hi:step, inclusive (default -0.1:1.1:0.1)")
    args = ap.parse_args(argv)
    if not args.logfile.is_file():
        raise SystemExit(f"{args.logfile}: no such file")
    rows, auc = analyse(load_records(args.logfile), thresholds_from(args.thresholds))
    csv_path, md_path = write_outputs(rows, auc, args.logfile, args.out or args.logfile.parent)
    best = max(rows, key=lambda r: r["fact_f1"])
    print(
        f"ROC AUC {_cell(auc)}; best fact F1 {best['fact_f1']:.3f} at threshold {best['threshold']:g} "
        f"(kept length {best['mean_kept_len']:.2f}) -> {csv_path}, {md_path}"
    )
    return {"rows": rows, "auc": auc, "csv": str(csv_path), "md": str(md_path)}


if __name__ == "__main__":
    main(sys.argv[1:])
