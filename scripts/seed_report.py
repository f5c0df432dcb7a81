"""Convergence over seeds: each setting of a round as a distribution, not a run.

    python scripts/seed_report.py experiments/round7/runs.tgz --reference base --out experiments/round7/seeds
    python scripts/seed_report.py runs/round7 runs/round7b            # run folders, printed only

Inputs are run folders' parents or ``.tgz`` archives of them (scripts/pack_round.py's layout, unpacked
into a temporary folder). A run named ``[w<k>_]<setting>_s<seed>[<r>]`` belongs to ``<setting>``
(the wave prefix ``w<k>_`` is dropped, so waves pool); a letter after the seed (``_s1b``) marks a
repeat of that seed, listed beside its original and left out of the statistics. Each run contributes
its evaluations of the best validation checkpoint at BabiLong's 1K and 32K token budgets
(``eval_seed42_nt1000`` / ``nt32000``; with ``--last``, those of ``model_last.pt``, ``..._last``):
oracle-stop fact F1 x100 (the paper's Table 3 protocol,
computed from the fixed-budget records as scripts/report_round.py does) and fact EM, over the test
questions every file of the round holds.

Per setting: the seeds, the share of seeds with oracle-stop fact F1 >= ``--threshold`` (95) at 1K,
mean ± sample std over seeds at 1K and 32K, and a 95 % bootstrap interval of the mean that
resamples seeds and, within each, questions; the step at which validation fact EM first reached
0.8 (the "jump"); the checkpoint step evaluated. Per setting against ``--reference``: the difference
of means with a bootstrap interval paired over questions (the same test questions in every file),
seeds resampled within each setting. Deterministic (fixed bootstrap seed): the same inputs give the
same bytes. ``--out <P>`` writes ``<P>.md`` and ``<P>.json``.
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
from report_round import ReportError, fact_metrics, oracle_prefix, read_jsonl  # noqa: E402

RUN_NAME = re.compile(r"^(?:w\d+_)?(?P<setting>.+)_s(?P<seed>\d+)(?P<repeat>[a-z]?)$")
LENGTHS = {"1K": "eval_seed42_nt1000", "32K": "eval_seed42_nt32000"}
JUMP_EM = 0.8
BOOT = 4000


def eval_path(run: Path, stem: str) -> Path | None:
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (run / name).is_file():
            return run / name
    return None


def question_scores(path: Path) -> dict[int, tuple[float, float]]:
    """{test index: (oracle-stop fact F1 x100, fact EM x100)} of one evaluation file."""
    out = {}
    for r in read_jsonl(path):
        if r.get("sf_idx"):
            of1 = fact_metrics(oracle_prefix(r["pred_idx"], r["sf_idx"]), r["sf_idx"])["f1"]
            out[int(r["index"])] = (100.0 * of1, 100.0 * fact_metrics(r["pred_idx"], r["sf_idx"])["em"])
    return out


def run_facts(run: Path, suffix: str = "") -> dict[str, Any]:
    """The validation curve's jump and the evaluated checkpoint of one run folder."""
    rows = read_jsonl(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []
    jump = next((r["step"] for r in rows if (r.get("eval/fact_em") or 0) >= JUMP_EM), None)
    ckpt = {}
    summary = run / f"{LENGTHS['1K']}{suffix}.summary.json"
    if summary.is_file():
        ckpt = json.loads(summary.read_text()).get("checkpoint") or {}
    if ckpt.get("step") is None and rows:  # summaries written before they named their checkpoint
        top = max(r.get("eval/return", float("-inf")) for r in rows)  # training keeps the later model of a tie
        best = rows[-1] if suffix == "_last" else [r for r in rows if r.get("eval/return") == top][-1]
        ckpt = {"step": best["step"], "validation": {"fact_em": best.get("eval/fact_em")}, "code_version": None}
    curve = {r["step"]: r.get("eval/fact_em") for r in rows}
    return {"jump": jump, "last_step": rows[-1]["step"] if rows else None, "checkpoint": ckpt, "curve": curve}


def collect(roots: Sequence[Path], suffix: str = "") -> dict[str, dict[str, dict[str, Any]]]:
    """{setting: {seed label: run}} with each run's per-question scores at every length; ``suffix``
    picks other evaluations of the runs (``_last``: of model_last.pt)."""
    settings: dict[str, dict[str, dict[str, Any]]] = {}
    for root in roots:
        for run in sorted(p for p in root.iterdir() if p.is_dir() and (p / "config.yaml").is_file()):
            m = RUN_NAME.match(run.name)
            if not m:
                continue
            label = m["seed"] + m["repeat"]
            if label in settings.get(m["setting"], {}):
                raise ReportError(f"{run}: a second run of setting {m['setting']!r} seed {label}")
            scores = {b: question_scores(p) for b, stem in LENGTHS.items() if (p := eval_path(run, stem + suffix))}
            settings.setdefault(m["setting"], {})[label] = {
                "name": run.name,
                "scores": scores,
                **run_facts(run, suffix),
            }
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


def report(settings: dict[str, dict[str, dict[str, Any]]], reference: str | None, threshold: float) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"threshold": threshold, "bootstrap": BOOT, "lengths": {}, "settings": {}}
    draws = {}
    for length in LENGTHS:
        qs = common_questions(settings, length)
        out["lengths"][length] = len(qs)
        draws[length] = (qs, rng.integers(0, len(qs), size=(BOOT, len(qs))) if qs else None)
    for name, runs in sorted(settings.items()):
        entry: dict[str, Any] = {"seeds": {}, "repeats": {}}
        for label, r in sorted(runs.items(), key=lambda kv: (int(re.sub(r"\D", "", kv[0])), kv[0])):
            cell = {b: run_mean(r, b, draws[b][0], 0) for b in LENGTHS}
            cell["em_1K"] = run_mean(r, "1K", draws["1K"][0], 1)
            cell.update(
                curve=r["curve"],
                jump=r["jump"],
                last_step=r["last_step"],
                checkpoint_step=r["checkpoint"].get("step"),
                code_version=r["checkpoint"].get("code_version"),
            )
            entry["seeds" if label.isdigit() else "repeats"][label] = cell
        for length in LENGTHS:
            qs, q_idx = draws[length]
            m = matrix(runs, length, qs, 0) if qs else np.zeros((0, 0))
            if m.shape[0] == 0:
                continue
            means = m.mean(axis=1)
            stat = {
                "n": int(m.shape[0]),
                "mean": round(float(means.mean()), 2),
                "std": round(float(means.std(ddof=1)), 2) if m.shape[0] > 1 else None,
                "ci95": interval(boot_means(m, rng, q_idx)),
            }
            if length == "1K":
                stat["converged"] = int((means >= threshold).sum())
            entry[length] = stat
        out["settings"][name] = entry
    if reference is not None:
        if reference not in settings:
            raise ReportError(f"--reference {reference!r}: no such setting (have {', '.join(sorted(settings))})")
        out["reference"] = reference
        for name, runs in sorted(settings.items()):
            if name == reference:
                continue
            diffs = {}
            for length in LENGTHS:
                qs, q_idx = draws[length]
                a, b = (matrix(x, length, qs, 0) for x in (runs, settings[reference])) if qs else (None, None)
                if a is None or a.shape[0] == 0 or b.shape[0] == 0:
                    continue
                # the same question draw for both settings (paired over questions); seeds drawn apart
                d = boot_means(a, rng, q_idx) - boot_means(b, rng, q_idx)
                diffs[length] = {"diff": round(float(a.mean() - b.mean()), 2), "ci95": interval(d)}
            out["settings"][name]["vs_reference"] = diffs
    return out


def _stat(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    std = "-" if s["std"] is None else f"{s['std']:.1f}"
    return f"{s['mean']:.1f} ± {std} [{s['ci95'][0]:.1f}, {s['ci95'][1]:.1f}]"


def _diff(d: dict[str, Any] | None) -> str:
    return "-" if not d else f"{d['diff']:+.1f} [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"


def markdown(rep: dict[str, Any]) -> str:
    t = rep["threshold"]
    lines = [
        f"Oracle-stop fact F1 x100 of the best validation checkpoint; {rep['lengths'].get('1K', 0)} test questions at 1K, "
        f"{rep['lengths'].get('32K', 0)} at 32K (every file's common ones). Interval: 95 % bootstrap ({rep['bootstrap']} draws) "
        "over seeds and questions. Converged: seeds at >= "
        f"{t:g} at 1K. Jump: first validation step with fact EM >= {JUMP_EM}.",
        "",
        "| setting | seeds | converged | 1K mean ± std [95 % CI] | 32K mean ± std [95 % CI] | jump steps | per seed 1K / 32K |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in rep["settings"].items():
        seeds = e["seeds"]
        per = ", ".join(f"s{k} {v['1K']}/{v['32K']}" for k, v in seeds.items())
        jumps = ", ".join(str(v["jump"]) for v in seeds.values())
        conv = f"{e['1K']['converged']} of {e['1K']['n']}" if "1K" in e else "-"
        lines.append(
            f"| {name} | {len(seeds)} | {conv} | {_stat(e.get('1K'))} | {_stat(e.get('32K'))} | {jumps} | {per} |"
        )
    if rep.get("reference"):
        lines += [
            "",
            f"Difference of means to `{rep['reference']}` (x100), 95 % bootstrap interval paired over questions:",
            "",
            "| setting | 1K | 32K |",
            "|---|---|---|",
        ]
        for name, e in rep["settings"].items():
            if "vs_reference" in e:
                v = e["vs_reference"]
                lines.append(f"| {name} | {_diff(v.get('1K'))} | {_diff(v.get('32K'))} |")
    reps = [(n, k, v) for n, e in rep["settings"].items() for k, v in e["repeats"].items()]
    if reps:
        lines += ["", "Repeats of a seed (same tree, settings and card type; GPU nondeterminism):", ""]
        for n, k, v in reps:
            orig = rep["settings"][n]["seeds"].get(re.sub(r"\D", "", k), {})
            lines.append(
                f"- {n} seed {k}: {v['1K']} / {v['32K']} (jump {v['jump']}); the original: "
                f"{orig.get('1K')} / {orig.get('32K')} (jump {orig.get('jump')})"
            )
    lines += [
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
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", type=Path, help="folders holding run folders, or .tgz archives of them")
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
        help="--check fails when, at 1K or 32K, the upper end of "
        "the difference's 95 %% interval is below -tolerance or the difference below -2 x tolerance (x100)",
    )
    args = ap.parse_args(argv)
    if args.check and not args.reference:
        raise ReportError("--check needs --reference (the committed baseline's setting)")
    with tempfile.TemporaryDirectory() as tmp:
        roots = []
        for i, p in enumerate(args.inputs):
            if p.is_file() and p.name.endswith((".tgz", ".tar.gz")):
                dest = Path(tmp) / str(i)
                with tarfile.open(p) as tar:
                    tar.extractall(dest, filter="data")
                roots += sorted({q.parent.parent for q in dest.rglob("config.yaml")})
            elif p.is_dir():  # a round's folder of runs, or an unpacked archive with wave folders in it
                roots += sorted({q.parent.parent for q in p.rglob("config.yaml")}) or [p]
            else:
                raise ReportError(f"{p}: neither a folder nor a .tgz archive")
        rep = report(collect(sorted(set(roots)), "_last" if args.last else ""), args.reference, args.threshold)
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
