"""Convergence over seeds: each setting of a round as a distribution, not a run.

    python scripts/seed_report.py experiments/round7/runs.tar.xz --reference base --out experiments/round7/seeds
    python scripts/seed_report.py runs/round7 runs/round7b            # run folders, printed only
    python scripts/seed_report.py experiments/round9/runs.tar.xz experiments/round8/runs.tar.xz \
        --settings a01,a01r8 --reference a01r8 --check a01           # both archives hold an isoA
    python scripts/seed_report.py experiments/round9/runs.tar.xz --reference isoA --lengths 1K,32K,1M
    python scripts/seed_report.py experiments/round9/runs.tar.xz --settings isoA,a01 --same-questions
    python scripts/seed_report.py experiments/round10/runs.tar.xz --settings ctrl,d100,d200 --eval-seed 43 --lengths 32K
    python scripts/seed_report.py experiments/qa3_sparse/runs.tar.xz --settings ctrl,sp25 --lengths 1K,32K,S100

Inputs are run folders' parents or archives of them (``.tar.xz`` as scripts/pack_round.py writes them,
or the older rounds' ``.tgz``; unpacked into a temporary folder). A run named
``[w<k>_]<setting>_s<seed>[<r>]`` belongs to ``<setting>``
(the wave prefix ``w<k>_`` is dropped, so waves pool); a letter after the seed (``_s1b``) marks a
repeat of that seed, listed beside its original and left out of the statistics. ``--settings A,B``
reads only the runs of those settings (before two runs of one setting and seed are refused, so inputs
that share another setting's name still compare; a named setting no input holds is an error). Each run
contributes its evaluations of the best validation checkpoint at the BabiLong token budgets of
``--lengths`` (default ``1K,32K``; of 1K, 4K, 32K, 128K, 1M: ``eval_seed42_nt1000`` ... ``nt1000000``; and S100,
sentence mode at 100 sentences as the recipe trains, ``eval_seed42_ns100``: experiments/qa3_sparse/;
with ``--last``, those of ``model_last.pt``, ``..._last``): oracle-stop fact F1 x100 (the paper's
Table 3 protocol, computed from the fixed-budget records as scripts/report_round.py does) and fact EM,
over the test questions every file of the round at that length holds. ``--eval-seed N`` (default 42)
scores another haystack draw, the files ``eval_seed<N>_*`` at every length (round 10's second
32K draw is seed 43); a run without that draw's file at a length is a run not evaluated there, and the
header names the seed. The checkpoint column still comes from seed 42's 1K summary (one checkpoint,
every draw).

The lengths need not hold the same questions: each file holds the first test questions that fit its token
budget, and the 1K budget drops stories of more than 86 facts, so qa3's 200 at 1K are test questions 0-229
less 27 while its 200 at 32K are 0-199: 1K and 32K share 173 of 200 (experiments/qa3_32k/README.md). By
default each length is scored on its own set (questions matched by the record's ``index``, its place in the
file, which names the same question in every file of one length). ``--same-questions`` scores every length
on the questions that all of them hold, matched by the record's ``id`` (the test question; ``index`` i is not
the same question at two lengths), and the header says how many that is and how many each length holds
alone (``per_length`` in the JSON). It matches questions, not tasks: give it the settings of one task.

Per setting: the seeds, the share of seeds with oracle-stop fact F1 >= ``--threshold`` (95) at 1K,
mean ± sample std over seeds at each length, and a 95 % bootstrap interval of the mean that
resamples seeds and, within each, questions; the step at which validation fact EM first reached
0.8 (the "jump"); the checkpoint step evaluated. Per setting against ``--reference``: the difference
of means with a bootstrap interval paired over questions (the same test questions in every file),
seeds resampled within each setting. Where only some seeds of a setting were evaluated at a length
(round 9's 1M), its cell and differences there pool those seeds and say how many. Deterministic
(fixed bootstrap seed, drawn from in a fixed order): the same inputs and options give the same bytes;
another choice of settings or lengths moves the intervals' last digit. ``--out <P>`` writes ``<P>.md``
and ``<P>.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pack_round import READ_ARCHIVES  # noqa: E402
from report_round import ReportError, fact_metrics, oracle_prefix, read_jsonl  # noqa: E402

RUN_NAME = re.compile(r"^(?:w\d+_)?(?P<setting>.+)_s(?P<seed>\d+)(?P<repeat>[a-z]?)$")
# The lengths by name, each with its evaluation files' suffix (eval_seed<eval seed>_<suffix>): BabiLong's token
# budgets (nt<tokens>), and S100, the recipe's own training haystacks in sentence mode (100 sentences, ns100:
# experiments/qa3_sparse/'s diagnostic)
LENGTHS = {
    "1K": "nt1000",
    "4K": "nt4000",
    "32K": "nt32000",
    "128K": "nt128000",
    "1M": "nt1000000",
    "S100": "ns100",
}
DEFAULT_LENGTHS = ("1K", "32K")
DEFAULT_EVAL_SEED = 42  # the draw every round evaluates; round 10 adds seed 43 at 32K
JUMP_EM = 0.8
BOOT = 4000


def eval_stem(length: str, eval_seed: int = DEFAULT_EVAL_SEED) -> str:
    """The evaluation files' name at one length and haystack draw (eval_retriever.py's ``seed=``)."""
    return f"eval_seed{eval_seed}_{LENGTHS[length]}"


def eval_path(run: Path, stem: str) -> Path | None:
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (run / name).is_file():
            return run / name
    return None


def question_scores(path: Path, key: str = "index") -> dict[int, tuple[float, float]]:
    """{question: (oracle-stop fact F1 x100, fact EM x100)} of one evaluation file, the question named by
    the record's ``key``: ``index`` (its place in the file) or ``id`` (its test question)."""
    out = {}
    for r in read_jsonl(path):
        if r.get("sf_idx"):
            if key not in r:
                raise ReportError(f"{path}: a record without {key!r} (needed to match questions across lengths)")
            of1 = fact_metrics(oracle_prefix(r["pred_idx"], r["sf_idx"]), r["sf_idx"])["f1"]
            out[int(r[key])] = (100.0 * of1, 100.0 * fact_metrics(r["pred_idx"], r["sf_idx"])["em"])
    return out


def run_facts(run: Path, suffix: str = "") -> dict[str, Any]:
    """The validation curve's jump and the evaluated checkpoint of one run folder."""
    rows = read_jsonl(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []
    jump = next((r["step"] for r in rows if (r.get("eval/fact_em") or 0) >= JUMP_EM), None)
    ckpt = {}
    # the checkpoint is the run's, whichever draw is scored: seed 42's 1K summary names it
    summary = run / f"{eval_stem('1K')}{suffix}.summary.json"
    if summary.is_file():
        ckpt = json.loads(summary.read_text()).get("checkpoint") or {}
    if ckpt.get("step") is None and rows:  # summaries written before they named their checkpoint
        top = max(r.get("eval/return", float("-inf")) for r in rows)  # training keeps the later model of a tie
        best = rows[-1] if suffix == "_last" else [r for r in rows if r.get("eval/return") == top][-1]
        ckpt = {"step": best["step"], "validation": {"fact_em": best.get("eval/fact_em")}, "code_version": None}
    curve = {r["step"]: r.get("eval/fact_em") for r in rows}
    return {"jump": jump, "last_step": rows[-1]["step"] if rows else None, "checkpoint": ckpt, "curve": curve}


def collect(
    roots: Sequence[Path],
    suffix: str = "",
    lengths: Sequence[str] = DEFAULT_LENGTHS,
    keep: set[str] | None = None,
    key: str = "index",
    eval_seed: int = DEFAULT_EVAL_SEED,
) -> dict[str, dict[str, dict[str, Any]]]:
    """{setting: {seed label: run}} with each run's per-question scores at ``lengths``; ``suffix``
    picks other evaluations of the runs (``_last``: of model_last.pt); ``keep``, the settings read;
    ``key``, the record field naming a question (question_scores); ``eval_seed``, the haystack draw
    (a run without that draw's file at a length is a run not evaluated there)."""
    settings: dict[str, dict[str, dict[str, Any]]] = {}
    for root in roots:
        for run in sorted(p for p in root.iterdir() if p.is_dir() and (p / "config.yaml").is_file()):
            m = RUN_NAME.match(run.name)
            # filtered before the duplicate check, so that archives sharing a setting's name compare on others
            if not m or (keep is not None and m["setting"] not in keep):
                continue
            label = m["seed"] + m["repeat"]
            if label in settings.get(m["setting"], {}):
                raise ReportError(f"{run}: a second run of setting {m['setting']!r} seed {label}")
            scores = {
                b: question_scores(p, key) for b in lengths if (p := eval_path(run, eval_stem(b, eval_seed) + suffix))
            }
            settings.setdefault(m["setting"], {})[label] = {
                "name": run.name,
                "scores": scores,
                **run_facts(run, suffix),
            }
    if keep is not None and (missing := keep - set(settings)):
        raise ReportError(f"--settings: no input holds a run of {', '.join(sorted(missing))}")
    return settings


def common_questions(settings: dict[str, dict[str, dict[str, Any]]], length: str) -> list[int]:
    sets = [set(r["scores"][length]) for runs in settings.values() for r in runs.values() if length in r["scores"]]
    return sorted(set.intersection(*sets)) if sets else []


def matrix(runs: dict[str, dict[str, Any]], length: str, qs: list[int], col: int) -> np.ndarray:
    """seeds x questions of one setting (repeats and runs without this length left out)."""
    rows = [
        [r["scores"][length][q][col] for q in qs]
        for s, r in sorted(runs.items())
        if s.isdigit() and length in r["scores"]
    ]
    return np.array(rows, dtype=float).reshape(len(rows), len(qs))


def run_mean(run: dict[str, Any], length: str, qs: list[int], col: int) -> float | None:
    """One run's mean over the common questions (col 0: oracle-stop F1, 1: fact EM); None without it."""
    if length not in run["scores"] or not qs:
        return None
    return round(float(np.mean([run["scores"][length][q][col] for q in qs])), 2)


def boot_means(m: np.ndarray, rng: np.random.Generator, q_idx: np.ndarray) -> np.ndarray:
    """Bootstrap means: seeds resampled, then the given question resamples (one row per draw)."""
    seeds = rng.integers(0, m.shape[0], size=(BOOT, m.shape[0]))
    q_means = np.stack([m[:, q].mean(axis=1) for q in q_idx])  # (draws, seeds): each seed's mean per draw
    return np.take_along_axis(q_means, seeds, axis=1).mean(axis=1)


def interval(xs: np.ndarray) -> list[float]:
    lo, hi = np.percentile(xs, [2.5, 97.5])
    return [round(float(lo), 2), round(float(hi), 2)]


Draws = dict[str, tuple[list[int], np.ndarray | None]]


def shared_questions(settings: dict[str, dict[str, dict[str, Any]]], lengths: Sequence[str]) -> list[int]:
    """The questions every file at every one of ``lengths`` holds (--same-questions)."""
    per_length = {b: set(common_questions(settings, b)) for b in lengths}
    if empty := [b for b, qs in per_length.items() if not qs]:
        raise ReportError(f"--same-questions: no question common to the files at {', '.join(empty)}")
    shared = sorted(set.intersection(*per_length.values()))
    if not shared:
        raise ReportError(f"--same-questions: no question is held at every one of {', '.join(lengths)}")
    return shared


def question_draws(
    settings: dict[str, dict[str, dict[str, Any]]],
    lengths: Sequence[str],
    rng: np.random.Generator,
    same_questions: bool = False,
) -> Draws:
    """{length: (the questions every file at that length holds, or with ``same_questions`` every file at
    every length, BOOT resamples of them)}: one question draw per length, shared by every setting, so
    that differences are paired over questions."""
    shared = shared_questions(settings, lengths) if same_questions else None
    draws: Draws = {}
    for length in lengths:
        qs = shared if shared is not None else common_questions(settings, length)
        draws[length] = (qs, rng.integers(0, len(qs), size=(BOOT, len(qs))) if qs else None)
    return draws


def seed_order(item: tuple[str, Any]) -> tuple[int, str]:
    return int(re.sub(r"\D", "", item[0])), item[0]


def seed_cell(run: dict[str, Any], draws: Draws) -> dict[str, Any]:
    """One run's row: its mean at every length, fact EM at 1K, its curve, jump and checkpoint."""
    cell: dict[str, Any] = {b: run_mean(run, b, qs, 0) for b, (qs, _) in draws.items()}
    cell["em_1K"] = run_mean(run, "1K", draws["1K"][0], 1) if "1K" in draws else None
    cell.update(
        curve=run["curve"],
        jump=run["jump"],
        last_step=run["last_step"],
        checkpoint_step=run["checkpoint"].get("step"),
        code_version=run["checkpoint"].get("code_version"),
    )
    return cell


def length_stat(
    m: np.ndarray, q_idx: np.ndarray | None, rng: np.random.Generator, threshold: float | None
) -> dict[str, Any] | None:
    """Mean ± std over the seeds of a seeds x questions matrix and the bootstrap interval of the mean;
    with ``threshold``, the seeds at or above it. None when no seed was evaluated there."""
    if m.size == 0:
        return None
    means = m.mean(axis=1)
    stat = {
        "n": int(m.shape[0]),
        "mean": round(float(means.mean()), 2),
        "std": round(float(means.std(ddof=1)), 2) if m.shape[0] > 1 else None,
        "ci95": interval(boot_means(m, rng, q_idx)),
    }
    if threshold is not None:
        stat["converged"] = int((means >= threshold).sum())
    return stat


def differences(
    runs: dict[str, dict[str, Any]], ref: dict[str, dict[str, Any]], draws: Draws, rng: np.random.Generator
) -> dict[str, dict[str, Any]]:
    """Difference of means to the reference at each length both were evaluated at, over the seeds each
    has there: the same question draw for both (paired over questions), seeds drawn apart."""
    diffs = {}
    for length, (qs, q_idx) in draws.items():
        a, b = matrix(runs, length, qs, 0), matrix(ref, length, qs, 0)
        if a.size == 0 or b.size == 0:
            continue
        d = boot_means(a, rng, q_idx) - boot_means(b, rng, q_idx)
        diffs[length] = {"diff": round(float(a.mean() - b.mean()), 2), "ci95": interval(d)}
    return diffs


def report(
    settings: dict[str, dict[str, dict[str, Any]]],
    reference: str | None,
    threshold: float,
    lengths: Sequence[str] = DEFAULT_LENGTHS,
    same_questions: bool = False,
    eval_seed: int = DEFAULT_EVAL_SEED,
) -> dict[str, Any]:
    rng = np.random.default_rng(0)  # drawn from in a fixed order: the same inputs give the same bytes
    draws = question_draws(settings, lengths, rng, same_questions)
    lengths_n = {b: len(qs) for b, (qs, _) in draws.items()}
    out: dict[str, Any] = {"threshold": threshold, "bootstrap": BOOT, "lengths": lengths_n}
    if eval_seed != DEFAULT_EVAL_SEED:  # named only when not the default, so the committed reports keep their bytes
        out["eval_seed"] = eval_seed
    if same_questions:  # what each length would be scored on alone, for the header's note
        out["per_length"] = {b: len(common_questions(settings, b)) for b in lengths}
    out["settings"] = {}
    for name, runs in sorted(settings.items()):
        entry: dict[str, Any] = {"seeds": {}, "repeats": {}}
        for label, r in sorted(runs.items(), key=seed_order):
            entry["seeds" if label.isdigit() else "repeats"][label] = seed_cell(r, draws)
        for length, (qs, q_idx) in draws.items():
            # the converged share is a 1K notion (the threshold is the paper's 1K level)
            stat = length_stat(matrix(runs, length, qs, 0), q_idx, rng, threshold if length == "1K" else None)
            if stat:
                entry[length] = stat
        out["settings"][name] = entry
    if reference is not None:
        if reference not in settings:
            raise ReportError(f"--reference {reference!r}: no such setting (have {', '.join(sorted(settings))})")
        out["reference"] = reference
        for name, runs in sorted(settings.items()):
            if name != reference:
                out["settings"][name]["vs_reference"] = differences(runs, settings[reference], draws, rng)
    return out


def _seeds_note(n: int, of: int) -> str:
    """Where only some of a setting's seeds were evaluated at a length: how many the cell pools."""
    return "" if n >= of else f" ({n} seed{'s' if n != 1 else ''})"


def _stat(s: dict[str, Any] | None, seeds: int) -> str:
    if not s:
        return "-"
    std = "-" if s["std"] is None else f"{s['std']:.1f}"
    return f"{s['mean']:.1f} ± {std} [{s['ci95'][0]:.1f}, {s['ci95'][1]:.1f}]{_seeds_note(s['n'], seeds)}"


def _diff(d: dict[str, Any] | None) -> str:
    return "-" if not d else f"{d['diff']:+.1f} [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"


def _num(x: float | None) -> str:
    return "-" if x is None else str(x)


def _question_counts(rep: dict[str, Any]) -> str:
    """How many test questions each length is scored on, and which."""
    if "per_length" not in rep:
        (first, n), *rest = rep["lengths"].items()
        return (
            f"{n} test questions at {first}" + "".join(f", {k} at {b}" for b, k in rest) + " (every file's common ones)"
        )
    lengths = list(rep["lengths"])
    alone = ", ".join(f"{n} at {b}" for b, n in rep["per_length"].items())
    return (
        f"the same {rep['lengths'][lengths[0]]} test questions at {' and '.join(lengths)} (--same-questions: "
        f"those every file at every length holds, by test question id; each length alone holds {alone})"
    )


def _header(rep: dict[str, Any]) -> str:
    draw = f", eval seed {rep['eval_seed']} (eval_seed{rep['eval_seed']}_* files)" if "eval_seed" in rep else ""
    return (
        f"Oracle-stop fact F1 x100 of the best validation checkpoint{draw}; {_question_counts(rep)}. "
        f"Interval: 95 % bootstrap ({rep['bootstrap']} draws) over seeds and questions. Converged: seeds at >= "
        f"{rep['threshold']:g} at 1K. Jump: first validation step with fact EM >= {JUMP_EM}."
    )


def _settings_table(rep: dict[str, Any]) -> list[str]:
    lengths = list(rep["lengths"])
    lines = [
        "| setting | seeds | converged | "
        + " | ".join(f"{b} mean ± std [95 % CI]" for b in lengths)
        + f" | jump steps | per seed {' / '.join(lengths)} |",
        "|---" * (5 + len(lengths)) + "|",
    ]
    for name, e in rep["settings"].items():
        seeds = e["seeds"]
        per = ", ".join(f"s{k} " + "/".join(_num(v[b]) for b in lengths) for k, v in seeds.items())
        jumps = ", ".join(str(v["jump"]) for v in seeds.values())
        conv = f"{e['1K']['converged']} of {e['1K']['n']}" if "1K" in e else "-"
        cells = " | ".join(_stat(e.get(b), len(seeds)) for b in lengths)
        lines.append(f"| {name} | {len(seeds)} | {conv} | {cells} | {jumps} | {per} |")
    return lines


def _diff_cell(rep: dict[str, Any], name: str, length: str) -> str:
    """The difference at one length; where either side pools only some of its seeds, how many each."""
    d = rep["settings"][name]["vs_reference"].get(length)
    if not d:
        return "-"
    a, ref = rep["settings"][name], rep["settings"][rep["reference"]]
    na, nr = a[length]["n"], ref[length]["n"]
    partial = na < len(a["seeds"]) or nr < len(ref["seeds"])
    return _diff(d) + (f" ({na} vs {nr} seeds)" if partial else "")


def _diff_table(rep: dict[str, Any]) -> list[str]:
    lengths = list(rep["lengths"])
    lines = [
        "",
        f"Difference of means to `{rep['reference']}` (x100), 95 % bootstrap interval paired over questions:",
        "",
        f"| setting | {' | '.join(lengths)} |",
        "|---" * (1 + len(lengths)) + "|",
    ]
    for name, e in rep["settings"].items():
        if "vs_reference" in e:
            lines.append(f"| {name} | " + " | ".join(_diff_cell(rep, name, b) for b in lengths) + " |")
    return lines


def _repeats(rep: dict[str, Any]) -> list[str]:
    reps = [(n, k, v) for n, e in rep["settings"].items() for k, v in e["repeats"].items()]
    if not reps:
        return []
    lines = ["", "Repeats of a seed (same tree, settings and card type; GPU nondeterminism):", ""]
    for n, k, v in reps:
        orig = rep["settings"][n]["seeds"].get(re.sub(r"\D", "", k), {})
        here, there = (" / ".join(_num(x.get(b)) for b in rep["lengths"]) for x in (v, orig))
        lines.append(f"- {n} seed {k}: {here} (jump {v['jump']}); the original: {there} (jump {orig.get('jump')})")
    return lines


def _curves(rep: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "Validation fact EM every 200 steps (100 held-out training questions; the checkpoint evaluated in brackets):",
        "",
        "```",
    ]
    for name, e in rep["settings"].items():
        for label, v in (*e["seeds"].items(), *e["repeats"].items()):
            pts = " ".join(
                "-" if v["curve"].get(k) is None else f"{v['curve'][k]:.2f}" for k in sorted(v["curve"]) if k % 200 == 0
            )
            lines.append(f"{name:>10} s{label:<4} {pts}  [{v['checkpoint_step']}]")
    lines.append("```")
    return lines


def markdown(rep: dict[str, Any]) -> str:
    lines = [_header(rep), "", *_settings_table(rep)]
    if rep.get("reference"):
        lines += _diff_table(rep)
    lines += _repeats(rep) + _curves(rep)
    return "\n".join(lines) + "\n"


def names(text: str | None) -> list[str]:
    """A comma-separated option's names (spaces allowed after the commas)."""
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "inputs", nargs="+", type=Path, help="folders holding run folders, or .tar.xz / .tgz archives of them"
    )
    ap.add_argument("--reference", help="setting the others are compared with")
    ap.add_argument(
        "--threshold", type=float, default=95.0, help="oracle-stop fact F1 x100 at 1K that counts as converged"
    )
    ap.add_argument("--out", type=Path, help="write <out>.md and <out>.json")
    ap.add_argument("--last", action="store_true", help="score the evaluations of model_last.pt (eval_*_last)")
    ap.add_argument("--check", help="the learning check: exit 1 when this setting is worse than --reference")
    ap.add_argument(
        "--tolerance",
        type=float,
        default=1.0,
        help="--check fails when, at some reported length, the upper end of "
        "the difference's 95 %% interval is below -tolerance or the difference below -2 x tolerance (x100)",
    )
    ap.add_argument(
        "--settings", help="comma-separated settings: only their runs are read (inputs may share other names)"
    )
    ap.add_argument(
        "--lengths",
        default=",".join(DEFAULT_LENGTHS),
        help=f"comma-separated lengths reported, of {', '.join(LENGTHS)} (S100: 100 sentences, sentence mode; "
        "default: %(default)s)",
    )
    ap.add_argument(
        "--eval-seed",
        type=int,
        default=DEFAULT_EVAL_SEED,
        help="the haystack draw scored: the files eval_seed<N>_* at every length (default: %(default)s)",
    )
    ap.add_argument(
        "--same-questions",
        action="store_true",
        help="score every length on the test questions all of them hold (matched by the records' id)",
    )
    return ap.parse_args(argv)


def check_args(args: argparse.Namespace) -> tuple[tuple[str, ...], set[str] | None]:
    """The lengths (in LENGTHS' order) and the settings to keep (None: all), or an error naming the fault."""
    if args.check and not args.reference:
        raise ReportError("--check needs --reference (the committed baseline's setting)")
    asked = names(args.lengths)
    unknown = [b for b in asked if b not in LENGTHS]
    if unknown or not asked:
        raise ReportError(
            f"--lengths {args.lengths!r}: unknown {', '.join(unknown) or 'none given'} (known: {', '.join(LENGTHS)})"
        )
    keep = None if args.settings is None else set(names(args.settings))
    if keep is not None and not keep:
        raise ReportError("--settings names no setting")
    for flag, name in (("--reference", args.reference), ("--check", args.check)):
        if keep is not None and name is not None and name not in keep:
            raise ReportError(f"{flag} {name!r} is not among --settings ({', '.join(sorted(keep))})")
    return tuple(b for b in LENGTHS if b in asked), keep


def input_roots(inputs: Sequence[Path], tmp: Path) -> list[Path]:
    """The folders holding run folders: archives unpacked into ``tmp``, wave folders found inside."""
    roots = []
    for i, p in enumerate(inputs):
        if p.is_file() and p.name.endswith(READ_ARCHIVES):
            dest = tmp / str(i)
            with tarfile.open(p) as tar:
                tar.extractall(dest, filter="data")
            roots += sorted({q.parent.parent for q in dest.rglob("config.yaml")})
        elif p.is_dir():  # a round's folder of runs, or an unpacked archive with wave folders in it
            roots += sorted({q.parent.parent for q in p.rglob("config.yaml")}) or [p]
        else:
            raise ReportError(f"{p}: neither a folder nor a .tar.xz / .tgz archive")
    return sorted(set(roots))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    lengths, keep = check_args(args)
    with tempfile.TemporaryDirectory() as tmp:
        roots = input_roots(args.inputs, Path(tmp))
        key = "id" if args.same_questions else "index"
        settings = collect(roots, "_last" if args.last else "", lengths, keep, key, args.eval_seed)
        rep = report(settings, args.reference, args.threshold, lengths, args.same_questions, args.eval_seed)
    text = markdown(rep)
    print(text, end="")
    if args.out:
        args.out.with_suffix(".md").write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(rep, indent=1) + "\n", encoding="utf-8")
    if args.check:
        rep["check"] = learning_check(rep, args.check, args.tolerance)
        print(rep["check"]["line"])
    return rep


def learning_check(rep: dict[str, Any], setting: str, tolerance: float) -> dict[str, Any]:
    """Worse than the baseline at some length: the whole 95 % interval of the difference lies below
    -tolerance (clearly worse), or the difference itself is below -2·tolerance (worse on its face:
    with few or spread-out seeds the interval alone rarely excludes 0; rerun with more seeds before
    believing a pass or a failure near the line). docs/TESTING.md, "The GPU learning check"."""
    if setting not in rep["settings"] or setting == rep["reference"]:
        raise ReportError(f"--check {setting!r}: no such setting besides the reference")
    diffs = rep["settings"][setting]["vs_reference"]
    worse = [b for b, d in diffs.items() if d["ci95"][1] < -tolerance or d["diff"] < -2 * tolerance]
    passed = bool(diffs) and not worse
    detail = ", ".join(f"{b} {_diff(d)}" for b, d in diffs.items())
    verdict = "PASS" if passed else f"FAIL ({', '.join(worse) or 'no common length'})"
    return {
        "passed": passed,
        "line": f"learning check {setting} vs {rep['reference']}: {verdict}: {detail} (tolerance {tolerance:g})",
    }


if __name__ == "__main__":
    try:
        result = main()
    except ReportError as e:
        sys.exit(f"error: {e}")
    sys.exit(0 if result.get("check", {}).get("passed", True) else 1)
