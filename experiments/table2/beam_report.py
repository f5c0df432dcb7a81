#!/usr/bin/env python
"""Plan Q-RAG's path score chosen on validation, then the beam against greedy on test and out of domain.

    python experiments/table2/beam_report.py experiments/table2b/runs.tar.xz --out experiments/table2b/beam.md
    python experiments/table2/beam_report.py runs/table2b                      # an unpacked round, printed only
    python experiments/table2/beam_report.py experiments/table2/beam_scores --dirs val_train,test,ood_musique \
        --greedy experiments/table2/runs.tar.xz                                # the CPU files of the untrained encoder

Reads experiments/table2/beam_path_scores.py's ``<stem>.path_scores.json`` files (every
``eval.beam_score`` of one beam 4 × 3 evaluation, with each question's path per score) beside their
records, in each run folder's ``beam_val/``, ``beam_test/`` and ``beam_ood_musique/`` (round 12's
beam_eval.txt; ``--dirs`` names other folders). The input is a folder of run folders or an archive of
them (scripts/pack_round.py's ``.tar.xz``, or an older ``.tgz``), unpacked into a temporary folder.

**The choice.** The score with the best mean fact EM over every validation run (each run counts once,
whatever its setting or question count), or over the runs of the settings ``--choose-on`` names (the
trained ones: an untrained encoder's paths should not pick the trained planner's score; the other runs'
validation scores are still listed). Ties go to ``last``, the reference's rule and the default
(rl/eval/beam.py: the path's most recent Q); between other scores, to the earlier in
rl/eval/beam.py's PATH_SCORES order (``sum`` and ``mean`` always tie: every path of a step has the same
length). Means are compared exactly (fractions of questions), so a tie is a tie.

**The comparison.** On test and on MuSiQue out of domain, the chosen score's paths against greedy's
picks on the same questions: greedy's records are the run's own evaluation of the same data (round
12: Table 2b's ``eval_seed42`` files, ``real_test/`` for the runs trained on the generated stand-ins,
``ood_musique/eval_seed42_musique_T4`` out of domain; round 5's bare ``ood_musique/eval_seed42`` too),
found in the run folder or, with ``--greedy``, in the run folder of that name there. The pair must hold
the same questions (ids) and their settings (dataset, data, split, seed, T) must agree. Per run and
pooled over a setting's seeds: fact EM / F1 means, a 95 % bootstrap interval of the beam's mean and of
the difference to greedy, paired over questions and seeds (each draw resamples the seeds, then the
questions, the same for beam and greedy: report_table2.py's ``bootstrap``). A pooled cell holds the
questions every seed answered; one resting on a single seed says so, its interval then over questions
alone. A path-score file without per-question paths (the CPU test file was written before
beam_path_scores.py stored them) gives its summary's mean only, marked, with no interval.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts"), str(HERE)]
from pack_round import READ_ARCHIVES  # noqa: E402
from report_table2 import RUN, bootstrap  # noqa: E402

from prompts_and_metrics.metrics import fact_metrics  # noqa: E402

# rl/eval/beam.py PATH_SCORES, in its order (tests/eval/test_beam_report.py holds them equal); `last` first,
# so that "the earliest of the tied" is the tie rule. Not imported: that would load torch for a report.
SCORES = ("last", "sum", "mean", "first", "min")
DEFAULT = "last"
SPLITS = ("val", "test", "ood")
DEFAULT_DIRS = "beam_val,beam_test,beam_ood_musique"  # round 12's beam_eval.txt output_dir's
# where greedy's records of the same data lie in the run folder, first found first
GREEDY_DIRS = {"test": ("real_test", ""), "ood": ("ood_musique",)}
# the settings of an evaluation that must agree between a beam file and the greedy file it is paired with
SAME = ("dataset", "data_path", "split", "seed", "max_steps")
TITLES = {"test": "Test", "ood": "MuSiQue out of domain"}


class BeamReportError(Exception):
    pass


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def records_of(folder: Path, stem: str) -> Path | None:
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def meta_of(records: Path) -> dict[str, Any]:
    meta = records.with_name(records.name.removesuffix(".gz") + ".meta.json")
    return json.loads(meta.read_text(encoding="utf-8")) if meta.is_file() else {}


def scored(pred: Sequence[int], gold: Sequence[int]) -> tuple[float, float]:
    m = fact_metrics(pred, gold)
    return m["em"], m["f1"]


class BeamEval(NamedTuple):
    """One beam_path_scores.py file: its summary per score and, per question, (fact EM, F1) per score
    where the file holds the paths (``last`` always: the records are its picks)."""

    file: Path
    n: int
    summary: dict[str, dict[str, float]]
    per_question: dict[str, dict[str, tuple[float, float]]]  # score -> question id -> (EM, F1)
    meta: dict[str, Any]
    ids: list[str]  # in the file's index order

    def em(self, score: str) -> Fraction:
        """The score's fact EM over the file's questions, exact (EM is 0 or 1 per question)."""
        return Fraction(self.summary[score]["fact_em"]).limit_denominator(self.n)


def load_beam(scores_file: Path) -> BeamEval:
    data = json.loads(scores_file.read_text(encoding="utf-8"))
    stem = scores_file.name.removesuffix(".path_scores.json")
    rec_path = records_of(scores_file.parent, stem)
    if rec_path is None:
        raise BeamReportError(f"{scores_file}: no records {stem}.jsonl beside it")
    records = sorted(read_jsonl(rec_path), key=lambda r: r["index"])  # the order of the file's paths
    if len(records) != data["n"] or set(data["scores"]) != set(SCORES):
        raise BeamReportError(f"{scores_file}: {data['n']} questions and scores {sorted(data['scores'])}, "
                              f"but {len(records)} records and the scores {', '.join(SCORES)} expected")  # fmt: skip
    ids = [str(r["id"]) for r in records]
    if len(set(ids)) != len(ids):
        raise BeamReportError(f"{rec_path}: a question id twice")
    paths = data.get("paths") or {"last": [r["pred_idx"] for r in records]}
    per_question = {}
    for score, ps in paths.items():
        per_question[score] = {i: scored(p, r["sf_idx"]) for i, p, r in zip(ids, ps, records)}
        ems, f1s = zip(*per_question[score].values())
        want = data["scores"][score]
        if abs(np.mean(ems) - want["fact_em"]) > 1e-9 or abs(np.mean(f1s) - want["fact_f1"]) > 1e-9:
            raise BeamReportError(f"{scores_file}: its {score} fact EM / F1 are not those of its paths and records")
    return BeamEval(scores_file, len(records), data["scores"], per_question, meta_of(rec_path), ids)


class Run(NamedTuple):
    """A run folder's beam evaluations, and greedy's per question scores paired with them, by split."""

    name: str
    setting: str
    seed: int
    folder: Path
    evals: dict[str, BeamEval]  # split -> beam evaluation
    greedy: dict[str, dict[str, tuple[float, float]]]  # split -> question id -> (EM, F1)
    greedy_files: dict[str, Path]


def find_runs(root: Path, dirs: dict[str, str]) -> dict[str, Run]:
    """{run name: Run} for every folder of ``root`` (any depth) holding a path-score file in one of ``dirs``."""
    runs: dict[str, Run] = {}
    by_dir = {d: split for split, d in dirs.items()}
    for f in sorted(root.rglob("*.path_scores.json")):
        split, folder = by_dir.get(f.parent.name), f.parent.parent
        if split is None or any(p.startswith(".") for p in f.relative_to(root).parts):
            continue
        if folder.name in runs and runs[folder.name].folder != folder:
            raise BeamReportError(f"two run folders named {folder.name}: {runs[folder.name].folder} and {folder}")
        m = RUN.match(folder.name)
        run = runs.setdefault(
            folder.name, Run(folder.name, m["setting"].replace("_", ""), int(m["seed"] or 0), folder, {}, {}, {})
        )
        if split in run.evals:
            raise BeamReportError(f"{f.parent}: more than one path-score file")
        run.evals[split] = load_beam(f)
    return runs


def greedy_folder(greedy_root: Path | None, run: Run) -> Path:
    if greedy_root is None:
        return run.folder
    found = [p for p in greedy_root.rglob(run.name) if p.is_dir() and not p.name.startswith(".")]
    if len(found) != 1:
        raise BeamReportError(f"--greedy: {len(found)} run folders named {run.name} in it (one expected)")
    return found[0]


def greedy_stems(beam_stem: str) -> list[str]:
    """Greedy's file names for a beam file's: without the planner's suffix (``_beam4x3``, then a score's
    ``_sum`` ...), then the bare ``eval_seed<N>`` of the records written before the dataset and T suffixes."""
    stem = re.sub(r"_beam\d+x\d+(_[a-z]+)?$", "", beam_stem)
    bare = re.match(r"eval_seed\d+", stem)
    return [stem] + ([bare.group(0)] if bare and bare.group(0) != stem else [])


def attach_greedy(run: Run, split: str, greedy_root: Path | None) -> None:
    beam = run.evals[split]
    folder = greedy_folder(greedy_root, run)
    stem = beam.file.name.removesuffix(".path_scores.json")
    tried = [(folder / d, s) for d in GREEDY_DIRS[split] for s in greedy_stems(stem)]
    path = next((p for d, s in tried if (p := records_of(d, s))), None)
    if path is None:
        names = ", ".join(str((d / s).relative_to(folder)) + ".jsonl" for d, s in tried)
        raise BeamReportError(f"{run.name}: no greedy records for {beam.file.relative_to(run.folder)} ({names})")
    meta = meta_of(path)
    if meta.get("planner", "greedy") != "greedy":
        raise BeamReportError(f"{path}: planner {meta['planner']}, not greedy")
    if differ := [k for k in SAME if k in meta and k in beam.meta and meta[k] != beam.meta[k]]:
        pairs = ", ".join(f"{k} {beam.meta[k]!r} vs {meta[k]!r}" for k in differ)
        raise BeamReportError(f"{run.name}: {path} is not the data of {beam.file.name} ({pairs})")
    scores = {str(r["id"]): scored(r["pred_idx"], r["sf_idx"]) for r in read_jsonl(path)}
    if set(scores) != set(beam.ids):
        raise BeamReportError(
            f"{run.name}: {path} holds {len(scores)} questions, {beam.file.name} {beam.n}, "
            f"{len(set(scores) & set(beam.ids))} of them shared: not the same questions"
        )
    run.greedy[split], run.greedy_files[split] = scores, path


def choose(val: dict[str, BeamEval]) -> str:
    """The path score of the best mean fact EM over the validation runs (each run once); ties go to
    ``last``, then to the earlier in PATH_SCORES order."""
    if not val:
        raise BeamReportError("no validation path scores: nothing to choose the score on")
    return tied(val)[0]  # SCORES starts with `last`


def tied(val: dict[str, BeamEval]) -> list[str]:
    """The scores of the best mean fact EM over the validation runs, in PATH_SCORES order."""
    mean = {s: sum(e.em(s) for e in val.values()) / len(val) for s in SCORES}
    return [s for s in SCORES if mean[s] == max(mean.values())]


def pooled(runs: list[Run], split: str, score: str) -> dict[str, Any] | None:
    """One cell over ``runs`` (one or several seeds): greedy's and the beam's fact EM / F1 means, the
    beam's interval and the difference's, on the questions every run answered; None without a run.
    ``exact`` is False where some run's file lacks the score's per-question paths: then means only."""
    runs = [r for r in runs if split in r.evals]
    if not runs:
        return None
    cell: dict[str, Any] = {"seeds": len(runs), "runs": [r.name for r in runs]}
    if all(score in r.evals[split].per_question for r in runs):
        qs = sorted(set.intersection(*(set(r.evals[split].ids) for r in runs)))
        cell.update(exact=True, n=len(qs))
        for k, metric in enumerate(("em", "f1")):
            b = np.array([[r.evals[split].per_question[score][q][k] for q in qs] for r in runs])
            g = np.array([[r.greedy[split][q][k] for q in qs] for r in runs])
            cell[metric] = {
                "greedy": float(g.mean()),
                "beam": float(b.mean()),
                "beam_ci": bootstrap(b),
                "diff": float((b - g).mean()),
                "diff_ci": bootstrap(b - g),  # the same draws of seeds and questions for both: paired
            }
        return cell
    # means only: each run's summary against greedy on all its questions (they are the same, attach_greedy)
    cell.update(exact=False, n=min(r.evals[split].n for r in runs))
    for k, metric in enumerate(("em", "f1")):
        g = float(np.mean([np.mean([v[k] for v in r.greedy[split].values()]) for r in runs]))
        b = float(np.mean([r.evals[split].summary[score][f"fact_{metric}"] for r in runs]))
        cell[metric] = {"greedy": g, "beam": b, "beam_ci": None, "diff": b - g, "diff_ci": None}
    return cell


def report(
    runs: dict[str, Run], greedy_root: Path | None = None, choose_on: Sequence[str] | None = None
) -> dict[str, Any]:
    every = {name: r.evals["val"] for name, r in sorted(runs.items()) if "val" in r.evals}
    val = {n: e for n, e in every.items() if choose_on is None or runs[n].setting in choose_on}
    if choose_on is not None and not val:
        raise BeamReportError(f"--choose-on {','.join(choose_on)}: no validation run of these settings")
    chosen = choose(val)
    for r in runs.values():
        for split in ("test", "ood"):
            if split in r.evals:
                attach_greedy(r, split, greedy_root)
    settings: dict[str, list[Run]] = {}
    for r in sorted(runs.values(), key=lambda r: (r.setting, r.seed, r.name)):
        settings.setdefault(r.setting, []).append(r)
    out: dict[str, Any] = {"chosen": chosen, "tied": tied(val), "validation": {}, "splits": {}}
    out["choose_on"] = sorted(set(choose_on)) if choose_on is not None else None
    out["not_choosing"] = [n for n in every if n not in val]
    for name, e in every.items():
        out["validation"][name] = {"n": e.n, **{s: float(e.em(s)) for s in SCORES}}
    out["validation_mean"] = {s: float(sum(e.em(s) for e in val.values()) / len(val)) for s in SCORES}
    out["validation_settings"] = {
        k: {s: float(sum(every[r.name].em(s) for r in rs if r.name in every) / n) for s in SCORES}
        for k, rs in settings.items()
        if (n := sum(r.name in every for r in rs)) > 1
    }
    scores = [chosen] if chosen == DEFAULT else [chosen, DEFAULT]
    for split in ("test", "ood"):
        rows = []
        for setting, rs in settings.items():
            cells = {s: pooled(rs, split, s) for s in scores}
            if cells[chosen] is None:
                continue
            per_run = [(r.name, {s: pooled([r], split, s) for s in scores}) for r in rs if split in r.evals]
            data = rs[0].evals.get(split) or next(r.evals[split] for r in rs if split in r.evals)
            rows.append({"setting": setting, "data": data_label(data.meta), "pooled": cells, "runs": per_run})
        if rows:
            out["splits"][split] = rows
    return out


def data_label(meta: dict[str, Any]) -> str:
    return f"{meta.get('dataset', '?')} T = {meta.get('max_steps', '?')}"


def _f(x: float) -> str:
    return f"{x:.3f}"


def _ci(ci: tuple[float, float] | None, signed: bool = False) -> str:
    if ci is None:
        return " †"
    fmt = "{:+.3f}" if signed else "{:.3f}"
    return f" [{fmt.format(ci[0])}, {fmt.format(ci[1])}]"


def _cells(c: dict[str, Any], metric: str) -> list[str]:
    m = c[metric]
    return [_f(m["greedy"]), _f(m["beam"]) + _ci(m["beam_ci"]), f"{m['diff']:+.3f}" + _ci(m["diff_ci"], True)]


def _seeds(c: dict[str, Any]) -> str:
    if c["seeds"] == 1:
        return f"**1 seed only** ({c['runs'][0]}; interval over questions)"
    return f"{c['seeds']} seeds pooled"


def split_table(rows: list[dict[str, Any]], chosen: str) -> list[str]:
    extra = chosen != DEFAULT
    head = (
        f"| setting | runs | data | questions | greedy EM | beam `{chosen}` EM | Δ EM | greedy F1 | "
        f"beam `{chosen}` F1 | Δ F1 |" + (f" beam `{DEFAULT}` EM | Δ EM `{DEFAULT}` |" if extra else "")
    )
    lines = [head, "|---" * (10 + 2 * extra) + "|"]
    for row in rows:
        items = [(f"**{row['setting']}**", _seeds(row["pooled"][chosen]), row["pooled"])]
        if row["pooled"][chosen]["seeds"] > 1:
            items += [("", name, cells) for name, cells in row["runs"]]
        for label, runs, cells in items:
            c = cells[chosen]
            line = [label, runs, row["data"], str(c["n"]), *_cells(c, "em"), *_cells(c, "f1")]
            if extra:
                line += _cells(cells[DEFAULT], "em")[1:]
            lines.append("| " + " | ".join(line) + " |")
    return lines


def markdown(rep: dict[str, Any], source: str, greedy: str = "the run's own evaluation of them") -> str:
    chosen = rep["chosen"]
    nval = len(rep["validation"]) - len(rep["not_choosing"])
    lines = [
        "# Plan Q-RAG (beam 4 × 3): the path score chosen on validation, against greedy",
        "",
        f"Made by experiments/table2/beam_report.py from {source}.",
        "Fact EM / F1 (paragraph-level gold, prompts_and_metrics/metrics.py) of the paths",
        "experiments/table2/beam_path_scores.py recorded per `eval.beam_score`, against greedy's picks on the",
        f"same questions: {greedy}.",
        "",
        f"## Choice on validation ({nval} run{'s' if nval != 1 else ''})",
        "",
        "Fact EM per path score; the chosen score has the best mean over the validation runs (each run",
        "once); ties go to `last` (the reference's rule, the default), then to the earlier in",
        "rl/eval/beam.py's order (`sum` and `mean` always tie).",
        "",
        "| run | questions | " + " | ".join(f"`{s}`" for s in SCORES) + " |",
        "|---" * (2 + len(SCORES)) + "|",
    ]
    for name, v in rep["validation"].items():
        mark = " (not choosing)" if name in rep["not_choosing"] else ""
        lines.append(f"| {name}{mark} | {v['n']} | " + " | ".join(_f(v[s]) for s in SCORES) + " |")
    for setting, v in rep["validation_settings"].items():
        lines.append(f"| mean of {setting} | | " + " | ".join(_f(v[s]) for s in SCORES) + " |")
    best = rep["validation_mean"]
    mean_cells = " | ".join(f"**{_f(best[s])}**" if s == chosen else _f(best[s]) for s in SCORES)
    lines += [f"| **mean over {nval} run{'s' if nval != 1 else ''}** | | {mean_cells} |", ""]
    if rep["choose_on"] is not None:
        lines += [f"Chosen on the runs of {', '.join(f'`{k}`' for k in rep['choose_on'])} (`--choose-on`).", ""]
    if nval == 1:
        lines += ["The choice rests on **one run**.", ""]
    others = [f"`{s}`" for s in rep["tied"] if s != chosen]
    note = [*(["the default"] if chosen == DEFAULT else []), *([f"tied with {', '.join(others)}"] if others else [])]
    lines += [f"Chosen: **`{chosen}`**" + (f" ({'; '.join(note)})." if note else "."), ""]
    for split, rows in rep["splits"].items():
        lines += [f"## {TITLES[split]}: beam `{chosen}` against greedy", "", *split_table(rows, chosen), ""]
    lines += [
        "Each cell: the mean; in brackets a 95 % bootstrap interval that resamples the seeds and, within",
        "them, the questions; Δ = beam − greedy on the same questions, its interval paired (the same draws",
        "for both). A setting's first row pools its seeds over the questions every seed answered, the rows",
        "below it are its runs; a setting of one run says so, its interval then over questions alone.",
    ]
    if any(c["exact"] is False for rows in rep["splits"].values() for r in rows for c in r["pooled"].values()):
        lines += [
            "† The path-score file holds no per-question paths (written before beam_path_scores.py stored",
            "them): its summary's mean, no interval; Δ against greedy's mean on the same questions.",
        ]
    return "\n".join(lines) + "\n"


def unpack(path: Path, tmp: Path) -> Path:
    """A folder of run folders: ``path`` itself, or an archive of them unpacked into ``tmp``."""
    if path.is_dir():
        return path
    if path.is_file() and path.name.endswith(READ_ARCHIVES):
        with tarfile.open(path) as tar:
            tar.extractall(tmp, filter="data")
        return tmp
    raise BeamReportError(f"{path}: neither a folder nor a {' / '.join(READ_ARCHIVES)} archive")


def build(
    runs: Path,
    greedy: Path | None = None,
    dirs: str = DEFAULT_DIRS,
    source: str | None = None,
    choose_on: Sequence[str] | None = None,
) -> tuple[dict[str, Any], str]:
    """The report of ``runs`` (a folder of run folders or an archive), greedy's records from ``greedy``
    (default: the runs themselves); ``dirs``: the validation, test and out-of-domain folders; ``source``:
    what the text says it was made from (default: ``runs`` as given; scripts/make_results.sh gives a
    temporary folder, which must not reach a committed file); ``choose_on``: the settings whose validation
    runs choose the score (default: every run)."""
    names = [d.strip() for d in dirs.split(",")]
    if len(names) != len(SPLITS) or not all(names) or len(set(names)) != len(names):
        raise BeamReportError(f"--dirs {dirs!r}: three different folder names, validation, test, out of domain")
    with tempfile.TemporaryDirectory() as tmp:
        root = unpack(runs, Path(tmp) / "runs")
        greedy_root = unpack(greedy, Path(tmp) / "greedy") if greedy else None
        found = find_runs(root, dict(zip(SPLITS, names)))
        if not found:
            raise BeamReportError(f"{runs}: no *.path_scores.json in a run's {', '.join(names)}")
        rep = report(found, greedy_root, choose_on)
    source = source or f"`{runs}`"
    if greedy is None:
        return rep, markdown(rep, source)
    return rep, markdown(rep, source, f"the evaluation of the run of the same name in `{greedy}`")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="a folder of run folders, or a .tar.xz / .tgz archive of them")
    ap.add_argument("--greedy", type=Path, help="where greedy's records are (folder or archive; default: RUNS)")
    ap.add_argument(
        "--dirs", default=DEFAULT_DIRS, help="the run folders' sub-folders of validation, test and out-of-domain "
        "path scores, comma-separated (default: %(default)s)"
    )  # fmt: skip
    ap.add_argument(
        "--choose-on",
        help="settings whose validation runs choose the score, comma-separated (default: every run; round 12: "
        "the trained hqrag,hgen,mqrag)",
    )
    ap.add_argument("--out", type=Path, help="write the markdown here too")
    args = ap.parse_args(argv)
    choose_on = [k.strip() for k in args.choose_on.split(",") if k.strip()] if args.choose_on else None
    rep, text = build(args.runs, args.greedy, args.dirs, choose_on=choose_on)
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return rep


if __name__ == "__main__":
    try:
        main()
    except BeamReportError as e:
        sys.exit(f"error: {e}")
