"""Q-value stopping and the step budget T from retriever logs (paper App. B, Tables 5/6; DESIGN §9.3).

    python scripts/stopping_analysis.py runs/<run>/eval_seed42_ns50.jsonl [--out DIR]
        [--thresholds -0.1:1.1:0.1]                                     # App. B's table
    python scripts/stopping_analysis.py --choose runs/<run>/eval_seed42_ns50.jsonl \
        runs/<run>/eval_seed42_ns50_T12.jsonl [--out DIR] [--theta-grid 0:1.5:0.01]  # pick T and θ
    python scripts/stopping_analysis.py --cells experiments/t_and_stop/cells.txt \
        --out experiments/t_and_stop                                    # the committed tables

App. B's table (one log). For every threshold θ (strict ``<``): the kept prefix ends before the
first step t whose logged ``q_values[t] < θ`` (t = 0 included, so the kept length can be 0). Per
threshold it reports
* ``mean_kept_len`` and fact EM / F1 of the kept prefix (over all episodes);
* over the episodes that ever hold all gold chunks (t_earliest = shortest prefix holding them):
  the fractions of ``early`` (t_stop < t_earliest), ``perfect`` (=) and ``late`` (>) stops and
  ``mean_earliest_len``;
* per-step TPR / FPR of the "continue" decision (q_values[t] ≥ θ) where the label of step t is
  "continue" iff t < t_earliest (gold still missing before step t).
The step-level ROC AUC of q_values as a continue score is threshold-free (printed once).
Writes ``<log stem>.stopping.csv`` and ``.stopping.md`` next to the log (or into ``--out``).
Answer metrics need a reader run per prefix and are not computed here.

``--choose`` (fixed-budget greedy logs of one length: one run's, or several seeds'; a run's logs
that differ only in ``_T<n>`` are one sequence at several budgets) and ``--cells`` (groups of runs
from the rounds' archives, one a line) write ``t_and_stop.md`` / ``.csv``: fact F1 / EM at every
budget 1..T (a budget below an evaluated one is the prefix of the shortest evaluation above it: the
greedy picks of steps 1..T do not depend on the budget), and for θ with the ONLINE rule of
``eval.stop_q_threshold`` (stop before step t > 0 when its best Q is ≤ θ, so the θ found here is
the one to pass to evaluation or the retriever tool): chunks kept, fact F1 / EM, and the share of
samples whose stop dropped a gold chunk that the budget retrieves; θ chosen per run on the even
positions of the test list (highest fact F1, the middle of the tied plateau) and reported on the odd
ones, beside no stop, oracle stop and the ROC AUC of Q as a "continue" score (also within one step).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import re
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]  # a --cells file names its archives from here
sys.path.insert(0, str(REPO / "scripts"))
from get_data import sha256 as sha256_of  # noqa: E402  (the scripts' one file hash)
from pack_round import READ_ARCHIVES  # noqa: E402

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
    """The records of an eval_retriever.py log, plain or gzipped (as the older runs.tgz archives hold them)."""
    text = gzip.open(path, "rt", encoding="utf-8").read() if path.suffix == ".gz" else path.read_text(encoding="utf-8")
    out = []
    for no, line in enumerate(text.splitlines(), 1):
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


# -- the step budget T and the online stop threshold θ over runs (paper reviewers' question) -------

NO_STOP = float("-inf")  # the θ that never stops: the fixed budget T
# the θ columns of the committed tables (the choice itself searches --theta-grid)
DISPLAY_THETAS = (NO_STOP, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.1)
T_SUFFIX = re.compile(r"_T\d+(?=_|$)")  # eval_records.eval_stem's budget suffix
TIE = 1e-12


class Episode(NamedTuple):
    key: tuple[str, str]  # (the record file without its _T<n> suffix, sample id)
    index: int  # position in the seed-permuted test set; even: validation half, odd: test half
    sf: tuple[int, ...]
    pred: tuple[int, ...]
    q: tuple[float, ...]


class Run(NamedTuple):
    name: str
    episodes: dict[int, dict[tuple[str, str], Episode]]  # evaluated budget T -> key -> episode; same keys


class Cell(NamedTuple):
    name: str
    task: str
    length: str
    encoder: str
    source: str
    patterns: tuple[str, ...]
    theta_from: str | None


def kept_online(q_values: Sequence[float], theta: float) -> int:
    """Chunks kept under ``eval.stop_q_threshold=theta`` (rl/eval/greedy.py): the episode stops
    before the first step t > 0 whose best Q is <= theta, so at least one chunk is kept. Stopping
    only cuts the greedy sequence short and ``q_values[t]`` is step t's best Q, so this prefix of a
    fixed-budget record is what the online run returns."""
    for t in range(1, len(q_values)):
        if q_values[t] <= theta:
            return t
    return len(q_values)


def theta_label(theta: float) -> str:
    return "none" if theta == NO_STOP else f"{theta:.2f}"


def read_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(settings, records) of a fixed-budget greedy log; its meta file gives the budget T."""
    name = path.name[: -len(".gz")] if path.name.endswith(".gz") else path.name
    meta_path = path.with_name(name + ".meta.json")
    if not meta_path.is_file():
        raise SystemExit(f"{path}: no {meta_path.name} beside it (eval_retriever.py writes one; its max_steps is T)")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("planner", "greedy") != "greedy":
        raise SystemExit(
            f"{path}: planner {meta['planner']!r}; a beam's kept sequence is no prefix of a shorter budget's"
        )
    if meta.get("stop_q_threshold") is not None or meta.get("oracle_stop"):
        raise SystemExit(
            f"{path}: an early-stopped evaluation; evaluate at the fixed budget (no stop) for this analysis"
        )
    return meta, load_records(path)


def load_run(name: str, run_dir: Path, files: Sequence[Path]) -> Run:
    """One run's fixed-budget logs: files that differ only in T (``_T<n>``) form one family (one
    length, one NIAH subtask, ...), which must hold records at every evaluated T; the samples kept
    are those that every file of their family holds, so each budget is scored on the same samples."""
    fams: dict[str, dict[int, dict[str, dict[str, Any]]]] = {}
    settings: dict[str, tuple[Path, dict[str, Any]]] = {}
    for path in files:
        meta, recs = read_log(path)
        rel = path.relative_to(run_dir) if path.is_relative_to(run_dir) else Path(path.name)
        stem = rel.name.removesuffix(".gz").removesuffix(".jsonl")
        family = (rel.parent / T_SUFFIX.sub("", stem)).as_posix()
        t = int(meta["max_steps"])
        same = {k: v for k, v in meta.items() if k != "max_steps"}
        first = settings.setdefault(family, (path, same))
        diff = sorted(k for k in set(same) | set(first[1]) if same.get(k) != first[1].get(k))
        if diff:
            raise SystemExit(f"{path} and {first[0].name}: settings differ beyond T ({', '.join(diff)})")
        if t in fams.setdefault(family, {}):
            raise SystemExit(f"{path}: a second log of {family} at T = {t}")
        for pos, r in enumerate(recs):
            r.setdefault("index", pos)  # every record since record_format 2 carries it
        # gold unknown (null em): no fact metric, as in the evaluation summaries
        fams[family][t] = {str(r["id"]): r for r in recs if r.get("em", 0) is not None and r["sf_idx"]}
    budgets = {f: sorted(ts) for f, ts in fams.items()}
    if len({tuple(b) for b in budgets.values()}) > 1:
        raise SystemExit(f"{run_dir}: its logs are at different budgets per family: {budgets}")
    episodes: dict[int, dict[tuple[str, str], Episode]] = {}
    for family, by_t in fams.items():
        common = set.intersection(*(set(recs) for recs in by_t.values()))
        for t, recs in by_t.items():
            for sid in sorted(common):
                r = recs[sid]
                episodes.setdefault(t, {})[(family, sid)] = Episode(
                    (family, sid),
                    int(r["index"]),
                    tuple(r["sf_idx"]),
                    tuple(r["pred_idx"]),
                    tuple(float(q) for q in r["q_values"]),
                )
    if not episodes or not next(iter(episodes.values())):
        raise SystemExit(f"{run_dir}: no sample with a known gold in {len(files)} log(s)")
    return Run(name, episodes)


def episodes_at(run: Run, budget: int) -> list[Episode]:
    """Every sample at budget T: the prefix of the shortest evaluation with T' >= T (T' = T: the
    evaluation itself; the greedy picks of steps 1..T do not depend on T, ``prefix_check``)."""
    src = min((t for t in run.episodes if t >= budget), default=None)
    if src is None:
        raise ValueError(f"{run.name}: no evaluation at T >= {budget}")
    return [e._replace(pred=e.pred[:budget], q=e.q[:budget]) for _, e in sorted(run.episodes[src].items())]


def prefix_check(run: Run) -> dict[str, int]:
    """Per pair of evaluated budgets T1 < T2, the T2 record's first T1 picks against the T1 record:
    samples compared, samples whose picks differ, samples whose fact EM or F1 differ."""
    n = picks = metrics = 0
    ts = sorted(run.episodes)
    for i, t1 in enumerate(ts):
        for t2 in ts[i + 1 :]:
            for key, e1 in run.episodes[t1].items():
                e2 = run.episodes[t2][key]
                n += 1
                picks += e2.pred[:t1] != e1.pred
                metrics += fact_scores(e2.pred[:t1], e2.sf) != fact_scores(e1.pred, e1.sf)
    return {"compared": n, "picks_differ": picks, "metrics_differ": metrics}


def mean_of(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("no samples")
    return sum(values) / len(values)


def budget_metrics(eps: Sequence[Episode]) -> dict[str, float]:
    scores = [fact_scores(e.pred, e.sf) for e in eps]
    return {"fact_em": mean_of([s[0] for s in scores]), "fact_f1": mean_of([s[1] for s in scores])}


def theta_metrics(eps: Sequence[Episode], theta: float) -> dict[str, float]:
    """Mean chunks kept, fact EM / F1 of the kept prefix, and ``lost``: the share of samples whose
    stop dropped a gold chunk that the fixed budget retrieves (stopped while a gold fact was missing)."""
    kept, em, f1, lost = [], [], [], []
    for e in eps:
        k = kept_online(e.q, theta)
        s_em, s_f1 = fact_scores(e.pred[:k], e.sf)
        kept.append(k)
        em.append(s_em)
        f1.append(s_f1)
        lost.append(float(not (set(e.sf) & set(e.pred)) <= set(e.pred[:k])))
    return {"kept": mean_of(kept), "fact_em": mean_of(em), "fact_f1": mean_of(f1), "lost": mean_of(lost)}


def oracle_f1(eps: Sequence[Episode]) -> float:
    """Fact F1 when each episode stops on the step that completes its gold set (the paper's
    protocol; the whole sequence when it never completes): the ceiling for any θ."""
    f1 = []
    for e in eps:
        te = earliest_complete(e.pred, e.sf)
        f1.append(fact_scores(e.pred[: te or len(e.pred)], e.sf)[1])
    return mean_of(f1)


def continue_steps(eps: Sequence[Episode]) -> list[tuple[int, float, bool]]:
    """(t, best Q, "continue") for the steps t > 0 (where the online rule decides) of the episodes
    that complete their gold set: "continue" iff gold is still missing before step t."""
    out = []
    for e in eps:
        te = earliest_complete(e.pred, e.sf)
        if te is not None:
            out += [(t, e.q[t], t < te) for t in range(1, len(e.q))]
    return out


def stop_auc(eps: Sequence[Episode]) -> float | None:
    """ROC AUC of the best Q as a "continue" score over ``continue_steps`` (the paper's App. B
    measure, here over t > 0). Q falls over an episode whatever the encoder learned, and late steps
    are the "stop" ones, so this rewards the fall alone as well: ``stop_auc_same_step`` does not."""
    steps = continue_steps(eps)
    return roc_auc([q for _, q, _ in steps], [y for _, _, y in steps])


def stop_auc_same_step(eps: Sequence[Episode]) -> float | None:
    """The AUC with pairs taken within one step t only: the mean over t of step t's AUC weighted
    by its (continue, stop) pairs = P(Q of a "continue" step > Q of a "stop" step at the same t).
    1: Q tells a complete gold set from a missing one; 0.5: it does not (None: no step has both)."""
    by_t: dict[int, tuple[list[float], list[bool]]] = {}
    for t, q, y in continue_steps(eps):
        by_t.setdefault(t, ([], []))[0].append(q)
        by_t[t][1].append(y)
    num = den = 0.0
    for qs, ys in by_t.values():
        auc = roc_auc(qs, ys)
        if auc is not None:
            pairs = sum(ys) * (len(ys) - sum(ys))
            num += auc * pairs
            den += pairs
    return num / den if den else None


def halves(eps: Sequence[Episode]) -> tuple[list[Episode], list[Episode]]:
    """(validation, test): the even and odd positions of the seed-permuted test set, two disjoint
    random halves (an evaluation log holds test questions only)."""
    return [e for e in eps if e.index % 2 == 0], [e for e in eps if e.index % 2 == 1]


def choose_theta(eps: Sequence[Episode], grid: Sequence[float]) -> float:
    """The θ of ``grid`` (NO_STOP, then ascending) with the highest fact F1 on ``eps``. F1 is flat
    between two consecutive Q values of the sample, so several grid points tie: take the middle of
    the run of consecutive grid points tied with the first best one, the point farthest from both
    edges of that plateau (a θ at an edge flips samples whose Q lies just beyond it)."""
    if list(grid) != sorted(grid):
        raise ValueError("the θ grid must be ascending")
    f1 = [theta_metrics(eps, th)["fact_f1"] for th in grid]
    best = max(f1)
    i = next(k for k, v in enumerate(f1) if v >= best - TIE)
    j = i
    while j + 1 < len(grid) and f1[j + 1] >= best - TIE:
        j += 1
    return grid[(i + j) // 2]


def analyse_group(
    runs: Sequence[Run], grid: Sequence[float], ref: dict[tuple[str, int], float] | None = None
) -> dict[str, Any]:
    """The tables' rows for one group of runs (seeds of one setting at one length): fact F1 / EM at
    every budget 1..T_max (T_max: the longest budget all runs reach), the DISPLAY_THETAS sweep on all
    samples and the θ chosen on the validation half with its test-half result at every evaluated
    budget, plus each run's prefix check. ``ref``: (run name, T) -> θ chosen elsewhere (another
    length of the same runs), applied to this group's test half."""
    t_max = min(max(r.episodes) for r in runs)
    evaluated = sorted(set.intersection(*(set(r.episodes) for r in runs)))
    out: dict[str, Any] = {"t_max": t_max, "evaluated": evaluated, "budget": [], "theta": [], "chosen": []}
    out["prefix"] = {r.name: prefix_check(r) for r in runs}
    out["n"] = {r.name: len(next(iter(r.episodes.values()))) for r in runs}
    for r in runs:
        for t in range(1, t_max + 1):
            out["budget"].append({"run": r.name, "T": t, **budget_metrics(episodes_at(r, t))})
        for t in evaluated:
            eps = episodes_at(r, t)
            for th in DISPLAY_THETAS:
                out["theta"].append({"run": r.name, "T": t, "theta": th, **theta_metrics(eps, th)})
            val, test = halves(eps)
            if not val or not test:
                raise SystemExit(f"{r.name}: {len(eps)} sample(s); choosing θ on one half needs two at least")
            th = choose_theta(val, grid)
            row = {"run": r.name, "T": t, "theta": th, "n_val": len(val), "n_test": len(test)}
            row["val_f1"] = theta_metrics(val, th)["fact_f1"]
            row.update({f"test_{k}": v for k, v in theta_metrics(test, th).items()})
            fixed = budget_metrics(test)
            row["fixed_f1"], row["fixed_em"] = fixed["fact_f1"], fixed["fact_em"]
            row["oracle_f1"] = oracle_f1(test)
            row["auc"] = stop_auc(eps)
            row["auc_step"] = stop_auc_same_step(eps)
            row["completable"] = sum(earliest_complete(e.pred, e.sf) is not None for e in eps)
            if ref is not None and (r.name, t) in ref:
                row["ref_theta"] = ref[(r.name, t)]
                row.update({f"ref_{k}": v for k, v in theta_metrics(test, ref[(r.name, t)]).items()})
            out["chosen"].append(row)
    return out


# -- the committed tables: groups of runs from the rounds' archives ---------------------------------


def read_cells(path: Path) -> list[Cell]:
    """``<name> <task> <length> <encoder> <archive or folder> <glob> [<glob> ...] [theta_from=<name>]``
    a line; the archive is named from the repository's root (or absolute), the globs from the
    archive's root; ``#`` starts a comment."""
    cells: list[Cell] = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        ref = [w.split("=", 1)[1] for w in words if w.startswith("theta_from=")]
        words = [w for w in words if not w.startswith("theta_from=")]
        if len(words) < 6:
            raise SystemExit(f"{path}:{no}: expected <name> <task> <length> <encoder> <source> <glob>...")
        if ref and ref[0] not in {c.name for c in cells}:
            raise SystemExit(f"{path}:{no}: theta_from={ref[0]} names no earlier line")
        if words[0] in {c.name for c in cells}:
            raise SystemExit(f"{path}:{no}: a second line named {words[0]}")
        cells.append(Cell(*words[:5], tuple(words[5:]), ref[0] if ref else None))
    if not cells:
        raise SystemExit(f"{path}: no lines")
    return cells


def run_folder(path: Path, root: Path | None) -> Path:
    """The nearest folder above ``path`` (up to ``root``) holding the run's config.yaml (its parent
    if none)."""
    for d in path.parents:
        if (d / "config.yaml").is_file():
            return d
        if d == root:
            break
    return path.parent


def group_runs(files: Sequence[Path], root: Path | None) -> list[Run]:
    """The files' runs, named by their folder relative to ``root`` (None: the folder's name)."""
    by_run: dict[Path, list[Path]] = {}
    for f in files:
        by_run.setdefault(run_folder(f, root), []).append(f)
    return [
        load_run(d.relative_to(root).as_posix() if root and d.is_relative_to(root) else d.name, d, fs)
        for d, fs in sorted(by_run.items())
    ]


def analyse_cells(cells: Sequence[Cell], base: Path, grid: Sequence[float], tmp: Path) -> list[dict[str, Any]]:
    """Every line's group, its archive unpacked once (a folder is read in place)."""
    roots: dict[str, Path] = {}
    done: dict[str, dict[str, Any]] = {}
    out = []
    for c in cells:
        src = base / c.source
        if c.source not in roots:
            if src.is_dir():
                roots[c.source] = src
            elif src.is_file() and src.name.endswith(READ_ARCHIVES):
                roots[c.source] = tmp / str(len(roots))
                with tarfile.open(src) as tar:
                    tar.extractall(roots[c.source], filter="data")
            else:
                raise SystemExit(f"{c.name}: {src} is neither a folder nor a .tar.xz / .tgz archive")
        root = roots[c.source]
        files = sorted({f for p in c.patterns for f in root.glob(p) if f.is_file()})
        if not files:
            raise SystemExit(f"{c.name}: no file in {c.source} matches {' '.join(c.patterns)}")
        ref = None
        if c.theta_from:
            ref = {(row["run"], row["T"]): row["theta"] for row in done[c.theta_from]["chosen"]}
        res = analyse_group(group_runs(files, root), grid, ref)
        res.update(cell=c, sha256=sha256_of(src) if src.is_file() else None)
        done[c.name] = res
        out.append(res)
    return out


def _mean(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return sum(vals) / len(vals) if vals else None


def _sd(rows: Sequence[dict[str, Any]], key: str) -> str:
    vals = [r[key] for r in rows]
    if len(vals) < 2:
        return ""
    m = sum(vals) / len(vals)
    return f" ± {(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5:.3f}"


def markdown(groups: Sequence[dict[str, Any]], command: str) -> str:
    t_all = max(g["t_max"] for g in groups)
    lines = [
        "# Step budget T and Q-value stop threshold θ",
        "",
        f"Made by `{command}` from greedy fixed-budget evaluation records. A budget below an evaluated",
        "one is the prefix of the shortest evaluation above it; θ is `eval.stop_q_threshold` (stop before",
        "step t > 0 when its best Q is ≤ θ), scored on the same records. Means over the group's runs",
        "(seeds); per-run values in t_and_stop.csv.",
        "",
        "## Groups",
        "",
        "| group | task | length | encoder | runs | questions per run | evaluated T | prefix check: picks / metrics differ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        c = g["cell"]
        pc = g["prefix"].values()
        comp = sum(p["compared"] for p in pc)
        check = (
            f"{sum(p['picks_differ'] for p in pc)} / {sum(p['metrics_differ'] for p in pc)} of {comp}" if comp else "–"
        )
        ns = sorted(set(g["n"].values()))
        lines.append(
            f"| {c.name} | {c.task} | {c.length} | {c.encoder} | {', '.join(g['n'])} | "
            f"{'/'.join(map(str, ns))} | {', '.join(map(str, g['evaluated']))} | {check} |"
        )
    for key, title in (("fact_f1", "Fact F1"), ("fact_em", "Fact EM")):
        lines += ["", f"## {title} against the budget T", ""]
        lines += ["| group | " + " | ".join(f"T={t}" for t in range(1, t_all + 1)) + " |"]
        lines += ["|---|" + "---|" * t_all]
        for g in groups:
            cells = []
            for t in range(1, t_all + 1):
                rows = [r for r in g["budget"] if r["T"] == t]
                cells.append(f"{_mean(rows, key):.3f}" if rows else "")
            lines.append(f"| {g['cell'].name} | " + " | ".join(cells) + " |")
    sweeps = (
        ("kept", "chunks kept"),
        ("fact_f1", "fact F1"),
        ("fact_em", "fact EM"),
        ("lost", "share of samples whose stop dropped a gold chunk the budget retrieves"),
    )
    for key, title in sweeps:
        lines += ["", f"## θ sweep, all questions: {title}", ""]
        lines += ["| group | T | " + " | ".join(f"θ={theta_label(th)}" for th in DISPLAY_THETAS) + " |"]
        lines += ["|---|---|" + "---|" * len(DISPLAY_THETAS)]
        for g in groups:
            for t in g["evaluated"]:
                vals = [
                    _mean([r for r in g["theta"] if r["T"] == t and r["theta"] == th], key) for th in DISPLAY_THETAS
                ]
                lines.append(f"| {g['cell'].name} | {t} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    lines += [
        "",
        "## θ chosen on the validation half, result on the test half",
        "",
        "θ per run maximises fact F1 on the even positions of the test list (the middle of the tied",
        "plateau on the grid); the odd positions report. `fixed`: no stop at the same T. `oracle`: stop on",
        "the step that completes the gold set (the ceiling). `lost`: share of test samples whose stop",
        "dropped a gold chunk the budget retrieves. AUC: the best Q as a 'continue' score over the steps",
        "t > 0 of the episodes that complete their gold set (`episodes`: how many, all questions, summed",
        "over runs), 'continue' iff gold is still missing; `same step`: pairs compared within one step",
        "only (Q falls over any episode; this AUC does not reward that). 1 = Q tells a complete gold set",
        "from a missing one, 0.5 = it does not. `θ from`: the θ each run chose at another length, applied",
        "here (the test half).",
        "",
        "| group | T | θ per run | kept | F1 | F1 fixed | F1 oracle | EM | EM fixed | lost | AUC | AUC same step "
        "| episodes | θ from: F1 / EM / lost |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        for t in g["evaluated"]:
            rows = [r for r in g["chosen"] if r["T"] == t]
            thetas = ", ".join(theta_label(r["theta"]) for r in rows)
            auc, auc_step = _mean(rows, "auc"), _mean(rows, "auc_step")
            ref = "–"
            if g["cell"].theta_from and all("ref_theta" in r for r in rows):
                ref = (
                    f"{g['cell'].theta_from}: {_mean(rows, 'ref_fact_f1'):.3f} / "
                    f"{_mean(rows, 'ref_fact_em'):.3f} / {_mean(rows, 'ref_lost'):.3f}"
                )
            lines.append(
                f"| {g['cell'].name} | {t} | {thetas} | {_mean(rows, 'test_kept'):.2f} | "
                f"{_mean(rows, 'test_fact_f1'):.3f}{_sd(rows, 'test_fact_f1')} | {_mean(rows, 'fixed_f1'):.3f} | "
                f"{_mean(rows, 'oracle_f1'):.3f} | {_mean(rows, 'test_fact_em'):.3f} | {_mean(rows, 'fixed_em'):.3f} | "
                f"{_mean(rows, 'test_lost'):.3f} | {'–' if auc is None else f'{auc:.3f}'} | "
                f"{'–' if auc_step is None else f'{auc_step:.3f}'} | {sum(r['completable'] for r in rows)} | {ref} |"
            )
    sources = {(g["cell"].source, g["sha256"]) for g in groups}
    lines += ["", "Sources: " + "; ".join(f"`{s}`" + (f" (sha256 {h[:12]}…)" if h else "") for s, h in sorted(sources))]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = (
    "section", "group", "run", "T", "theta", "n", "kept", "fact_f1", "fact_em", "lost",
    "fixed_f1", "fixed_em", "oracle_f1", "auc", "auc_step", "completable",
)  # fmt: skip


def csv_rows(groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        name = g["cell"].name
        for r in g["budget"]:
            rows.append({"section": "budget", "group": name, "run": r["run"], "T": r["T"], "n": g["n"][r["run"]]} | r)
        for r in g["theta"]:
            rows.append({"section": "theta_all", "group": name, "n": g["n"][r["run"]]} | r)
        for r in g["chosen"]:
            test = {k.removeprefix("test_"): v for k, v in r.items() if k.startswith("test_")}
            rows.append({"section": "theta_chosen_test", "group": name, "n": r["n_test"]} | r | test)
    out = []
    for r in rows:
        row = {k: r.get(k) for k in CSV_COLUMNS}
        if row["theta"] is not None:
            row["theta"] = theta_label(row["theta"])
        out.append({k: "" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    return out


def write_tables(groups: Sequence[dict[str, Any]], out_dir: Path, command: str) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, csv_path = out_dir / "t_and_stop.md", out_dir / "t_and_stop.csv"
    md.write_text(markdown(groups, command), encoding="utf-8")
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerows(csv_rows(groups))
    return md, csv_path


def summary_lines(groups: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for g in groups:
        for t in g["evaluated"]:
            rows = [r for r in g["chosen"] if r["T"] == t]
            out.append(
                f"{g['cell'].name} T={t}: θ {', '.join(theta_label(r['theta']) for r in rows)}; test fact F1 "
                f"{_mean(rows, 'test_fact_f1'):.3f} (fixed {_mean(rows, 'fixed_f1'):.3f}), kept "
                f"{_mean(rows, 'test_kept'):.2f}, lost {_mean(rows, 'test_lost'):.3f}"
            )
    return out


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def write_outputs(rows: list[dict[str, Any]], auc: float | None, log_path: Path, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    name = log_path.name.removesuffix(".gz")
    stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else Path(name).stem
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
    ap.add_argument("logfile", type=Path, nargs="*", help="eval_retriever.py JSONL log(s), plain or .gz")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--choose",
        action="store_true",
        help="T and θ of the given fixed-budget logs (one run's, or several seeds'; the same length)",
    )
    mode.add_argument("--cells", type=Path, help="a file of groups of runs in archives (the committed tables)")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: the log's / cells file's folder)")
    ap.add_argument("--thresholds", default="-0.1:1.1:0.1", help="App. B mode: lo:hi:step, inclusive")
    ap.add_argument("--theta-grid", default="0:1.5:0.01", help="θ candidates for --choose / --cells: lo:hi:step")
    args = ap.parse_args(argv)
    if args.choose or args.cells:
        grid = [NO_STOP, *thresholds_from(args.theta_grid)]
        if args.cells:
            if args.logfile:
                ap.error("--cells takes no log files")
            if not args.cells.is_file():
                raise SystemExit(f"{args.cells}: no such file")
            out = args.out or args.cells.parent
            with tempfile.TemporaryDirectory() as tmp:
                groups = analyse_cells(read_cells(args.cells), REPO, grid, Path(tmp))
            command = f"python scripts/stopping_analysis.py --cells {args.cells} --out {out}"
        else:
            if not args.logfile:
                ap.error("--choose needs the log files")
            missing = [str(p) for p in args.logfile if not p.is_file()]
            if missing:
                raise SystemExit(f"no such file: {', '.join(missing)}")
            runs = group_runs([p.resolve() for p in args.logfile], None)
            cell = Cell("logs", "-", "-", "-", "-", tuple(str(p) for p in args.logfile), None)
            groups = [analyse_group(runs, grid) | {"cell": cell, "sha256": None}]
            out = args.out or args.logfile[0].parent
            command = "python scripts/stopping_analysis.py --choose " + " ".join(map(str, args.logfile))
        md, csv_path = write_tables(groups, out, command)
        print("\n".join(summary_lines(groups)))
        print(f"-> {md}, {csv_path}")
        return {"groups": groups, "md": str(md), "csv": str(csv_path)}
    if len(args.logfile) != 1:
        ap.error("give one log (or --choose / --cells)")
    log = args.logfile[0]
    if not log.is_file():
        raise SystemExit(f"{log}: no such file")
    rows, auc = analyse(load_records(log), thresholds_from(args.thresholds))
    csv_path, md_path = write_outputs(rows, auc, log, args.out or log.parent)
    best = max(rows, key=lambda r: r["fact_f1"])
    print(
        f"ROC AUC {_cell(auc)}; best fact F1 {best['fact_f1']:.3f} at threshold {best['threshold']:g} "
        f"(kept length {best['mean_kept_len']:.2f}) -> {csv_path}, {md_path}"
    )
    return {"rows": rows, "auc": auc, "csv": str(csv_path), "md": str(md_path)}


if __name__ == "__main__":
    main(sys.argv[1:])
