"""Tables and plots of a GPU round (docs/RESULTS.md) from its run folders.

    python scripts/report_round.py <run folders> --out experiments/round9
    scripts/make_results.sh            # every round of experiments/: its runs.tar.xz unpacked, then this

Reads each run's ``config_resolved.yaml`` / ``config.yaml``, ``metrics.jsonl`` (in-training validation curve) and its
evaluation records ``eval_seed<seed>_nt<N>.jsonl`` (BabiLong's official token budget, N GPT-2
tokens: ``envs.length_unit=tokens``) or ``eval_seed<seed>_ns<N>.jsonl`` (N haystack sentences, the
reference's unit), plain (as scripts/pack_round.py packs them) or gzipped (``.jsonl.gz``, as the older
rounds' ``runs.tgz`` hold them), with the ``.summary.json`` / ``.jsonl.meta.json`` beside them, and
writes into ``--out``:

* ``curves.md`` / ``curves.png``: the validation curve (fact EM against optimiser steps) of every run;
* ``lengths.md`` / ``lengths.png``: qa1-qa5 (runs ``f_qa<i>``; qa3 = ``--qa3``) at every evaluated
  length: samples, measured encoder tokens, fact EM and fact F1 at the fixed budget T and with oracle
  stopping, and the sha256 of the bAbI facts file each number came from (``settings.data_sha256``);
  the paper's points beside ours in the plot;
* ``table3.md`` / ``table3.png``: Table 3 on qa3 (Q-RAG ``t_qrag_s*``, w/o Soft-Q ``t_nosoftq_s*``,
  w/o Target ``t_notarget_s*``, SFT ``t_sft_s*``, w/o FT ``t_noft``): mean ± population std over
  seeds with the per-seed values, oracle stopping and fixed budget;
* ``generated.md``: qa3 trained on generated data (``g_qa3``) against the real-trained Q-RAG seeds,
  fact EM on the same real test file at each length;
* ``qa3_decoys.md`` (only with ``--babi``): qa3 fact EM split by *decoy pick-ups*, the artefact of
  the generated qa3 files that rounds 2-3 studied.

A run or length that is missing is a dash: the report works on a partial round.

Oracle stopping (the paper's protocol; the reference's test environments stop once every gold chunk
is held) is computed from the fixed-budget records: greedy evaluation is deterministic, so the
oracle-stopped episode is the prefix of the fixed-budget one that ends at the step where the last gold
chunk was taken. Fact EM (every gold fact retrieved, extras allowed) is the same under both rules:
the prefix holds every gold fact exactly when the whole episode does; only precision, hence F1,
changes. ``eval_*_oracle.jsonl`` files written with ``+legacy.oracle_stop=true`` are read as a
check of that rule (``oracle_check`` in the printed summary).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from prompts_and_metrics.metrics import fact_metrics

ROOT = Path(__file__).resolve().parents[1]

BUDGETS = ["1K", "4K", "32K", "128K", "1M", "10M"]  # the BabiLong grid
BUDGET_TOKENS = dict(zip(BUDGETS, (1_000, 4_000, 32_000, 128_000, 1_000_000, 10_000_000)))
TOKEN_GRID = {n: b for b, n in BUDGET_TOKENS.items()}  # envs.num_tokens -> budget
SENTENCE_GRID = {50: "1K", 160: "4K", 1200: "32K", 4600: "128K", 40000: "1M", 400000: "10M"}  # the reference's
# Paper Table 3 (QA3 fact F1 x100, oracle stopping, 3 seeds) at 1K, 4K, 32K, 128K, 1M; docs/DESIGN.md §10.2.
PAPER_T3 = {
    "Q-RAG": [97.8, 97.4, 97.1, 96.8, 96.5],
    "w/o Soft-Q": [95.9, 95.5, 94.5, 94.0, 93.3],
    "w/o Target": [79.2, 78.1, 77.6, 77.4, 75.9],
    "SFT": [20.33, 20.87, 20.10, 18.30, None],
    "w/o FT": [15.52, 16.38, 15.51, 15.34, None],
}
# Paper Figure 2 (reader answer accuracy, Qwen3-4B; read off the figure, ±0.005) at 1K ... 10M;
# docs/DESIGN.md §10.1. Not fact EM: plotted as the paper's level, not as the same metric.
PAPER_FIG2 = {
    "QA3": [0.95, 0.9675, 0.965, 0.963, 0.952, 0.93],
    "QA1-QA5 average": [0.96, 0.965, 0.966, 0.97, 0.963, 0.953],
}
TASKS = ["qa1", "qa2", "qa3", "qa4", "qa5"]
METHODS = {"t_qrag": "Q-RAG", "t_nosoftq": "w/o Soft-Q", "t_notarget": "w/o Target", "t_sft": "SFT", "t_noft": "w/o FT"}
GENERATED_QA3 = "g_qa3"  # one run, or seeds g_qa3_s1, g_qa3_s2, ... (averaged like the Table 3 methods)


def generated_runs(runs: dict[str, Path]) -> list[str]:
    return sorted(n for n in runs if n == GENERATED_QA3 or re.fullmatch(GENERATED_QA3 + r"_s\d+", n))


DASH = "–"
EVAL_NAME = re.compile(r"^eval_seed(\d+)_(nt|ns)(\d+)(_oracle)?\.jsonl(\.gz)?$")


class ReportError(Exception):
    """Bad input: printed as one line, nothing written for the section that hit it."""


class Length(NamedTuple):
    """One haystack size: ``unit`` "nt" (GPT-2 token budget) or "ns" (haystack sentences)."""

    unit: str
    n: int

    @property
    def budget(self) -> str | None:
        return (TOKEN_GRID if self.unit == "nt" else SENTENCE_GRID).get(self.n)

    @property
    def header(self) -> str:
        if self.unit == "nt":
            return self.budget or f"{self.n:,} tok."
        return f"{self.budget}≈ ({self.n} sent.)" if self.budget else f"{self.n} sent."

    @property
    def x_tokens(self) -> float | None:
        """Position on a token axis: the budget itself, or the nominal budget of a sentence count."""
        return float(self.n) if self.unit == "nt" else BUDGET_TOKENS.get(self.budget or "")

    def sort_key(self) -> tuple[int, int]:
        return (self.unit != "nt", self.n)


def oracle_prefix(pred_idx: Sequence[int], sf_idx: Iterable[int]) -> list[int]:
    """The retrieved chunks up to and including the step that completes the gold set (all of them
    when the gold set is never completed): what an oracle-stopped greedy episode returns."""
    gold, held = set(sf_idx), set()
    for t, a in enumerate(pred_idx):
        held.add(a)
        if gold and gold <= held:
            return list(pred_idx[: t + 1])
    return list(pred_idx)


@functools.cache  # each file is read by several tables
def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file (plain or gzipped). A half-written last line (a run killed mid-write;
    the evaluation drops it too when it resumes) is skipped with a warning; a malformed line
    elsewhere is an error naming the file and line."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    rows = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if all(not rest.strip() for rest in lines[no:]):
                print(f"warning: {path}:{no}: skipped a half-written last line", file=sys.stderr)
                break
            raise ReportError(f"{path}:{no}: not valid JSON ({e})") from e
    return rows


def eval_files(run: Path, seed: int = 42) -> dict[tuple[Length, bool], Path]:
    """{(length, oracle-stopped file?): path} of one run folder's evaluations with ``seed``; a plain
    ``.jsonl`` is preferred to a ``.jsonl.gz`` of the same name (it may have grown since)."""
    out: dict[tuple[Length, bool], Path] = {}
    for p in sorted(run.glob("eval_seed*")):
        m = EVAL_NAME.match(p.name)
        if not m or int(m.group(1)) != seed:
            continue  # sidecars, other seeds, _last / _beam / _qstop files
        key = (Length(m.group(2), int(m.group(3))), m.group(4) is not None)
        if key not in out or not m.group(5):
            out[key] = p
    return out


def eval_settings(path: Path) -> list[dict[str, Any]]:
    """The settings an evaluation file was made with: its .summary.json's ``settings`` and its
    .jsonl.meta.json (the same dict, written at the start and at the end), those that exist."""
    stem = path.name.split(".jsonl")[0]
    found = []
    for side, key in ((f"{stem}.summary.json", "settings"), (f"{stem}.jsonl.meta.json", None)):
        p = path.with_name(side)
        if p.is_file():
            try:
                doc = json.loads(p.read_text())
            except json.JSONDecodeError as e:
                raise ReportError(f"{p}: not valid JSON ({e})") from e
            found.append((doc.get(key) or {}) if key else doc)
    return found


def data_sha256(path: Path) -> str | None:
    """``settings.data_sha256`` of an evaluation file (the sha256 of the uncompressed bAbI facts
    file it read); "conflict" when its .summary.json and .jsonl.meta.json disagree."""
    found = {str(d["data_sha256"]) for d in eval_settings(path) if d.get("data_sha256")}
    return None if not found else found.pop() if len(found) == 1 else "conflict"


def eval_task(path: Path) -> str | None:
    """The bAbI task an evaluation file is of (``qa3``), from its settings."""
    tasks = {str(d["task"]).split("_")[0] for d in eval_settings(path) if d.get("task")}
    return tasks.pop() if len(tasks) == 1 else None


@functools.cache
def score_file(path: Path, limit: int | None = None) -> dict[str, Any]:
    """Metrics of one evaluation file; ``limit`` keeps the samples with index < limit (the same
    test samples in every file of one length and seed)."""
    recs = read_jsonl(path)
    if limit is not None:
        if any("index" not in r for r in recs):
            raise ReportError(f"{path}: records without 'index' (written before record_format 2) cannot be aligned")
        recs = [r for r in recs if int(r["index"]) < limit]
    em, f1, of1, tok = [], [], [], []
    for no, r in enumerate(recs, 1):
        if "pred_idx" not in r or "sf_idx" not in r:
            raise ReportError(f"{path}: record {no} has no pred_idx/sf_idx (not an evaluation file?)")
        if not r["sf_idx"]:
            continue  # no gold facts: unscored, as in the evaluation's own summary (never EM 1.0)
        fixed = fact_metrics(r["pred_idx"], r["sf_idx"])
        em.append(fixed["em"])
        f1.append(fixed["f1"])
        of1.append(fact_metrics(oracle_prefix(r["pred_idx"], r["sf_idx"]), r["sf_idx"])["f1"])
        if r.get("text_len") is not None:
            tok.append(r["text_len"])
    mean = lambda xs: statistics.fmean(xs) if xs else None  # noqa: E731
    return {
        "n": len(em),
        "fact_em": mean(em),
        "fact_f1": mean(f1),
        "oracle_f1": mean(of1),
        "tokens": mean(tok),
        "sha": data_sha256(path),
    }


def common_limit(paths: Iterable[Path]) -> int | None:
    """The number of leading samples every file holds (files evaluated with num_samples=k hold the
    indices 0..k-1 of one seed's permutation, so their first min(k) are the same questions)."""
    sizes = [len(read_jsonl(p)) for p in paths]
    return min(sizes) if sizes else None


def manifest_names() -> dict[str, str]:
    """{sha256: file} of the data files the shipped manifests list (data/**/MANIFEST.json)."""
    out = {}
    for man in sorted((ROOT / "data").glob("**/MANIFEST.json")):
        try:
            files = json.loads(man.read_text()).get("files", [])
        except (json.JSONDecodeError, AttributeError):
            continue
        for f in files:
            if isinstance(f, dict) and f.get("sha256"):
                out[f["sha256"]] = str((man.parent / f["file"]).relative_to(ROOT))
    return out


def sha_legend(shas: Iterable[str | None]) -> list[str]:
    names = manifest_names()
    lines = []
    for sha in sorted({s for s in shas if s}):
        if sha == "conflict":
            lines.append("* `conflict`: the .summary.json and .meta.json of the file disagree")
        else:
            where = f"`{names[sha]}`" if sha in names else "a file no shipped manifest lists"
            lines.append(f"* `{sha[:12]}` = sha256 `{sha}` of {where}")
    return lines


def short_sha(sha: str | None) -> str:
    return DASH if sha is None else sha if sha == "conflict" else sha[:12]


def fmt(v: Any, key: str) -> str:
    if v is None:
        return DASH
    if key == "tokens":
        return f"{v / 1e3:.1f}K" if v < 1e6 else f"{v / 1e6:.2f}M"
    if key == "n":
        return str(int(v))
    if key == "sha":
        return short_sha(v)
    return f"{v:.3f}"


def mean_std(xs: list[float], digits: int = 1) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}"
    return f"{statistics.fmean(xs):.{digits}f} ± {statistics.pstdev(xs):.{digits}f}"


def length_note(cols: Sequence[Length]) -> str:
    parts = []
    if any(c.unit == "nt" for c in cols):
        parts.append(
            "Lengths are BabiLong's official token budgets (`envs.length_unit=tokens envs.num_tokens=N`: "
            "1K = 1 000 GPT-2 tokens ... 10M = 10 000 000, files `_nt<N>`)."
        )
    if any(c.unit == "ns" for c in cols):
        parts.append(
            "Columns marked `sent.` count haystack sentences as the reference did (`envs.num_sentences=N`, "
            "files `_ns<N>`); their budget label is the reference's nominal one (≈)."
        )
    return " ".join(parts)


def columns(found: Iterable[Length]) -> list[Length]:
    """The lengths found, plus the whole token grid when the round is in token mode (or has no
    evaluation at all), so that a length not evaluated yet shows as a dash."""
    found = set(found)
    if not found or any(c.unit == "nt" for c in found):
        found |= {Length("nt", n) for n in TOKEN_GRID}
    return sorted(found, key=Length.sort_key)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _legend(ax: Any, **kw: Any) -> None:
    if ax.get_legend_handles_labels()[0]:  # a panel of a partial round may have nothing to label
        ax.legend(**kw)


# -- validation curves -------------------------------------------------------------------------
def curve(run: Path) -> list[tuple[int, float]]:
    rows = read_jsonl(run / "metrics.jsonl")
    return [
        (int(r["step"]), float(r["eval/fact_em"]))
        for r in rows
        if r.get("eval/fact_em") is not None and r.get("eval/split") != "test"
    ]


def training_facts(run: Path) -> str:
    """The bAbI training file(s) a run read: from config_resolved.yaml, else from config.yaml resolved
    here ('?' when neither says; a config of another version still gets its curve reported)."""
    from omegaconf import OmegaConf

    path = None
    for name in ("config_resolved.yaml", "config.yaml"):
        if not (run / name).is_file():
            continue
        try:
            cfg = OmegaConf.load(run / name)
            if OmegaConf.select(cfg, "paths.root_dir") is not None:
                cfg.paths.root_dir = str(ROOT)
            path = OmegaConf.select(cfg, "envs.facts_train_path", throw_on_resolution_failure=True)
        except Exception:  # unresolvable outside its machine: try the next file
            continue
        if path is not None:
            break
    if path is None:
        return "?"
    paths = [path] if isinstance(path, str) else list(path)  # a list: several files read as one set
    return " + ".join(_under_data(Path(str(p))) for p in paths)


def _under_data(path: Path) -> str:
    parts = path.parts
    return "/".join(parts[parts.index("data") + 1 :]) if "data" in parts else str(path)


def curves_section(runs: dict[str, Path], out: Path) -> list[str]:
    names = [n for n in runs if (runs[n] / "metrics.jsonl").exists()]
    curves = {n: curve(runs[n]) for n in names}
    lines = [
        "Validation fact EM during training (held-out training questions, every `eval_interval` steps).",
        "",
        "| run | training facts | steps reached | validation fact EM, best | mean of the last 3 evaluations | curve |",
        "|---|---|---|---|---|---|",
    ]
    for n in names:
        c = curves[n]
        facts = training_facts(runs[n])
        if not c:
            lines.append(f"| {n} | {facts} | {DASH} | {DASH} | {DASH} | {DASH} |")
            continue
        last3 = statistics.fmean(em for _, em in c[-3:])
        lines.append(
            f"| {n} | {facts} | {c[-1][0]} | {max(em for _, em in c):.2f} | {last3:.2f} | "
            + " ".join(f"{em:.2f}" for _, em in c)
            + " |"
        )
    (out / "curves.md").write_text("\n".join(lines) + "\n")
    _plot_curves(curves, out / "curves.png")
    return lines


def method_of(name: str) -> str | None:
    return next((m for m in METHODS if name == m or name.startswith(m + "_s")), None)


def _plot_curves(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    plt = _pyplot()
    panels = {
        "per task (f_qa*) and generated-trained qa3 (g_qa3)": [n for n in curves if n.startswith(("f_", "g_"))],
        "qa3: Table 3 methods (one line per seed)": [n for n in curves if method_of(n)],
        "other runs": [n for n in curves if not n.startswith(("f_", "g_")) and not method_of(n)],
    }
    panels = {k: v for k, v in panels.items() if v} or {"no runs": []}
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), sharey=True, squeeze=False)
    for ax, (title, names) in zip(axes[0], panels.items()):
        for i, n in enumerate(names):
            c = curves[n]
            m = method_of(n)
            color = f"C{list(METHODS).index(m)}" if m else f"C{i % 10}"
            label = METHODS[m] if m and n in (f"{m}_s1", m) else (None if m else n)
            ax.plot([s for s, _ in c], [em for _, em in c], marker=".", color=color, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("optimiser step")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        _legend(ax, fontsize=7, ncol=2)
    axes[0][0].set_ylabel("validation fact EM")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- qa1-qa5 against length --------------------------------------------------------------------
def task_runs(runs: dict[str, Path], qa3: str | None) -> dict[str, tuple[str, Path] | None]:
    out: dict[str, tuple[str, Path] | None] = {}
    for task in TASKS:
        name = qa3 if task == "qa3" else f"f_{task}"
        out[task] = (name, runs[name]) if name and name in runs else None
    return out


ROWS = (
    ("n", "samples"),
    ("tokens", "measured encoder tokens"),
    ("fact_em", "fact EM (fixed T = oracle stop)"),
    ("fact_f1", "fact F1 (fixed T)"),
    ("oracle_f1", "fact F1 (oracle stop)"),
    ("sha", "test data sha256"),
)


def lengths_section(
    runs: dict[str, Path], qa3: str | None, seed: int, out: Path
) -> tuple[list[str], list[tuple[str, Path, Path]], dict]:
    tasks = task_runs(runs, qa3)
    table: dict[str, dict[Length, dict[str, Any]]] = {}
    checks = []
    warnings: list[str] = []
    for task, hit in tasks.items():
        if hit is None:
            table[task] = {}
            continue
        files = eval_files(hit[1], seed)
        table[task] = {ln: score_file(p) for (ln, oracle), p in files.items() if not oracle}
        other = sorted({t for p in files.values() if (t := eval_task(p)) and t != task})
        if other:
            warnings.append(f"**warning**: {task} = `{hit[0]}` holds evaluations of {', '.join(other)}")
        checks += [
            (task, files[(ln, False)], p) for (ln, oracle), p in files.items() if oracle and (ln, False) in files
        ]
    cols = columns(ln for row in table.values() for ln in row)
    run_names = ", ".join(f"{t} = `{h[0]}`" if h else f"{t} = {DASH} (no run)" for t, h in tasks.items())
    lines = [
        f"Evaluation seed {seed}, test split, greedy, fixed budget T; oracle stopping computed from the "
        f"same records. {length_note(cols)} Runs: {run_names}.",
        "",
        "| task | metric | " + " | ".join(c.header for c in cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    if warnings:
        lines[1:1] = ["", *warnings]
    glance = [
        "**At a glance**: fact EM / fact F1 with oracle stopping (samples)",
        "",
        "| task | run | " + " | ".join(c.header for c in cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for task, row in table.items():
        cells = [
            f"{row[c]['fact_em']:.3f} / {row[c]['oracle_f1']:.3f} ({row[c]['n']})" if c in row and row[c]["n"] else DASH
            for c in cols
        ]
        run = f"`{tasks[task][0]}`" if tasks[task] else DASH
        glance.append(f"| {task} | {run} | " + " | ".join(cells) + " |")
    lines[-2:-2] = [*glance, "", "**Every metric**", ""]
    for task, row in table.items():
        for key, label in ROWS:
            cells = [fmt(row[c][key], key) if c in row else DASH for c in cols]
            lines.append(f"| {task} | {label} | " + " | ".join(cells) + " |")
    legend = sha_legend(s["sha"] for row in table.values() for s in row.values())
    if legend:
        lines += ["", "Test data (sha256 of the uncompressed facts file, `settings.data_sha256`):", *legend]
    lines += target_lines(table)
    (out / "lengths.md").write_text("\n".join(lines) + "\n")
    gen = {}
    if gen_names := generated_runs(runs):  # the plot shows the first seed's curve
        gen = {ln: score_file(p) for (ln, oracle), p in eval_files(runs[gen_names[0]], seed).items() if not oracle}
    _plot_lengths(table, gen, out / "lengths.png")
    return lines, checks, table


# Issue 22's targets (MiniLM, token budgets): fact EM >= 0.97 at every length up to 1M and at most
# 0.02 lower at 1M than at 1K; qa3 oracle-stop fact F1 >= the paper's Table 3 minus 2 at 1K / 32K / 1M.
EM_FLOOR, EM_DROP = 0.97, 0.02
QA3_F1_FLOOR = {"1K": 0.958, "32K": 0.951, "1M": 0.945}


def target_lines(table: dict[str, dict[Length, dict[str, Any]]]) -> list[str]:
    """Whether each task meets the targets at the official token budgets ('–' and the missing
    lengths when it was not evaluated at all of them)."""
    grid = {b: Length("nt", n) for b, n in BUDGET_TOKENS.items()}

    def missing(row: dict[Length, Any], budgets: Iterable[str]) -> list[str]:
        return [b for b in budgets if grid[b] not in row]

    lines = [
        "",
        f"Targets of the real-bAbI reproduction (docs/REPRODUCE.md; token budgets): fact EM ≥ {EM_FLOOR} at 1K-1M, at most {EM_DROP} lower at 1M "
        "than at 1K; qa3 fact F1 with oracle stopping ≥ "
        + " / ".join(f"{100 * v:.1f}" for v in QA3_F1_FLOOR.values())
        + f" at {' / '.join(QA3_F1_FLOOR)}.",
        "",
        "| task | fact EM ≥ 0.97, 1K-1M | 1K → 1M drop ≤ 0.02 | qa3 oracle F1 |",
        "|---|---|---|---|",
    ]
    for task, row in table.items():
        upto = BUDGETS[:5]
        if gone := missing(row, upto):
            floor = f"{DASH} (no {', '.join(gone)})"
        else:
            worst = min(upto, key=lambda b: row[grid[b]]["fact_em"])
            v = row[grid[worst]]["fact_em"]
            floor = f"{'yes' if v >= EM_FLOOR else 'NO'} (min {v:.3f} at {worst})"
        if gone := missing(row, ("1K", "1M")):
            drop = f"{DASH} (no {', '.join(gone)})"
        else:
            d = row[grid["1K"]]["fact_em"] - row[grid["1M"]]["fact_em"]
            drop = f"{'yes' if d <= EM_DROP + 1e-12 else 'NO'} ({d:+.3f})"
        f1 = ""
        if task == "qa3":
            if gone := missing(row, QA3_F1_FLOOR):
                f1 = f"{DASH} (no {', '.join(gone)})"
            else:
                vs = {b: row[grid[b]]["oracle_f1"] for b in QA3_F1_FLOOR}
                ok = all(vs[b] >= QA3_F1_FLOOR[b] for b in vs)
                f1 = f"{'yes' if ok else 'NO'} (" + " / ".join(f"{100 * v:.1f}" for v in vs.values()) + ")"
        lines.append(f"| {task} | {floor} | {drop} | {f1} |")
    return lines


def _plot_lengths(
    table: dict[str, dict[Length, dict[str, Any]]], generated: dict[Length, dict[str, Any]], path: Path
) -> None:
    """One panel per task (fact EM and oracle-stop fact F1 against the budget, the paper's points
    beside them; qa3 also shows the generated-trained run), and fact EM of every task together."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), sharey=True)
    flat = axes.ravel()
    px = [BUDGET_TOKENS[b] for b in BUDGETS]
    for ax, task in zip(flat, TASKS):
        row = {ln: s for ln, s in table[task].items() if ln.x_tokens is not None}
        for unit, style in (("nt", "-"), ("ns", ":")):
            lens = sorted((ln for ln in row if ln.unit == unit), key=Length.sort_key)
            if not lens:
                continue
            x = [ln.x_tokens for ln in lens]
            tag = "" if unit == "nt" else " (sentence mode)"
            ax.plot(x, [row[ln]["fact_em"] for ln in lens], style, marker="o", color="C0", label="fact EM" + tag)
            ax.plot(
                x, [row[ln]["oracle_f1"] for ln in lens], style, marker="s", color="C1", label="fact F1, oracle" + tag
            )
        if task == "qa3" and (lens := sorted((ln for ln in generated if ln.unit == "nt"), key=Length.sort_key)):
            ax.plot(
                [ln.n for ln in lens],
                [generated[ln]["fact_em"] for ln in lens],
                "-.",
                marker="^",
                color="C2",
                label=f"fact EM, {GENERATED_QA3} (trained on generated)",
            )
        if task == "qa3":
            ax.plot(px[:5], [v / 100 for v in PAPER_T3["Q-RAG"]], "k--", marker="x", label="paper T3 fact F1, oracle")
            ax.plot(px, PAPER_FIG2["QA3"], "--", color="grey", marker="+", label="paper Fig. 2 answer acc.")
        else:
            ax.plot(
                px, PAPER_FIG2["QA1-QA5 average"], "--", color="grey", marker="+", label="paper Fig. 2 acc., QA1-5 avg"
            )
        ax.set_title(task + ("" if row else " (no evaluation)"), fontsize=10)
    ax = flat[5]
    for task in TASKS:
        lens = sorted((ln for ln in table[task] if ln.unit == "nt"), key=Length.sort_key)
        if lens:
            ax.plot(
                [ln.n for ln in lens],
                [table[task][ln]["fact_em"] for ln in lens],
                marker="o",
                color=f"C{TASKS.index(task)}",
                label=task,
            )
    ax.set_title("fact EM, fixed budget, all tasks (token budgets)", fontsize=10)
    for ax in flat:
        ax.set_xscale("log")
        ax.set_xlim(600, 1.6e7)
        ax.set_ylim(0, 1.02)
        ax.set_xticks(px, BUDGETS)
        ax.grid(alpha=0.3)
        _legend(ax, fontsize=7, loc="lower left")
    for ax in axes[1]:
        ax.set_xlabel("context length, BabiLong token budget")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- Table 3 -----------------------------------------------------------------------------------
def table3_runs(runs: dict[str, Path], qa3: str | None) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {m: [] for m in METHODS.values()}
    if qa3 and qa3 in runs and method_of(qa3) is None:  # an older round's qa3 run (s_D) is Q-RAG seed 1
        groups["Q-RAG"].append(qa3)
    for n in sorted(runs):
        if (m := method_of(n)) is not None:
            groups[METHODS[m]].append(n)
    return groups


def table3_section(runs: dict[str, Path], qa3: str | None, seed: int, out: Path) -> tuple[list[str], dict]:
    groups = table3_runs(runs, qa3)
    files: dict[str, dict[str, dict[Length, Path]]] = {
        method: {n: {ln: p for (ln, oracle), p in eval_files(runs[n], seed).items() if not oracle} for n in names}
        for method, names in groups.items()
    }
    held: dict[Length, int] = defaultdict(int)  # runs evaluated at each length
    for per_run in files.values():
        for f in per_run.values():
            for ln in f:
                held[ln] += 1
    # Table 3's lengths are those more than one run was evaluated at (a qa3 length grid of one run
    # belongs to lengths.md); a round with a single run shows all of its lengths
    shared = [ln for ln, k in held.items() if k > 1] or list(held)
    cols = sorted(shared, key=Length.sort_key)
    scores: dict[str, dict[Length, list[tuple[str, dict[str, Any]]]]] = {m: {} for m in groups}
    for ln in cols:
        paths = [f[ln] for per_run in files.values() for f in per_run.values() if ln in f]
        limit = common_limit(paths)
        for method, per_run in files.items():
            scores[method][ln] = [(n, score_file(f[ln], limit)) for n, f in per_run.items() if ln in f]
    paper_cols = [BUDGETS.index(c.budget) if c.budget in BUDGETS[:5] else None for c in cols]
    lines = [
        "qa3; mean ± population std over the seeds, the per-seed values in brackets (seed order "
        "s1, s2, s3), the samples per seed in parentheses (each cell on the test samples every run at "
        f"that length holds). Evaluation seed {seed}. {length_note(cols)}",
        "",
    ]
    for key, title in (
        ("oracle_f1", "fact F1 × 100, oracle stopping (the paper's protocol)"),
        ("fact_f1", "fact F1 × 100, fixed budget T"),
        ("fact_em", "fact EM × 100 (fixed budget = oracle stopping)"),
    ):
        paper = key == "oracle_f1"
        lines += [
            f"**{title}**",
            "",
            "| method | runs | " + " | ".join(c.header for c in cols) + (" | paper, same lengths |" if paper else " |"),
            "|---|---|" + "---|" * (len(cols) + paper),
        ]
        for method, per_len in scores.items():
            cells = []
            for ln in cols:
                got = per_len.get(ln, [])
                xs = [100 * s[key] for _, s in got if s[key] is not None]
                seeds = ", ".join(f"{x:.1f}" for x in xs)
                cells.append(f"{mean_std(xs)} [{seeds}] ({got[0][1]['n']})" if xs else DASH)
            names = ", ".join(groups[method]) or DASH
            row = f"| {method} | {names} | " + " | ".join(cells) + " |"
            if paper:
                pv = [PAPER_T3[method][i] if i is not None else None for i in paper_cols]
                row += " " + " / ".join(DASH if v is None else f"{v}" for v in pv) + " |"
            lines.append(row)
        lines.append("")
    known = sorted({s["sha"] for per_len in scores.values() for got in per_len.values() for _, s in got} - {None})
    unknown = [
        f"{n} at {ln.header}" for ln in cols for per_len in scores.values() for n, s in per_len[ln] if not s["sha"]
    ]
    if known or unknown:
        note = "Test data: " + (", ".join(f"`{short_sha(s)}`" for s in known) or DASH)
        note += " (MIXED: the cells were not all measured on one file)" if len(known) > 1 else ""
        lines.append(note + (f"; no data_sha256 recorded: {', '.join(unknown)}" if unknown else ""))
        lines += sha_legend(known)
    (out / "table3.md").write_text("\n".join(lines) + "\n")
    _plot_table3(scores, cols, out / "table3.png")
    return lines, scores


def _plot_table3(
    scores: dict[str, dict[Length, list[tuple[str, dict[str, Any]]]]], cols: list[Length], path: Path
) -> None:
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(1, 2, figsize=(15, 4.8), sharey=True)
    width = 0.8 / max(1, len(scores))
    for ax, key, title in (
        (axes[0], "oracle_f1", "fact F1 × 100, oracle stopping"),
        (axes[1], "fact_em", "fact EM × 100, fixed budget"),
    ):
        for i, (method, per_len) in enumerate(scores.items()):
            for j, ln in enumerate(cols):
                xs = [100 * s[key] for _, s in per_len.get(ln, []) if s[key] is not None]
                x = j + i * width
                if xs:
                    ax.bar(x, statistics.fmean(xs), width, color=f"C{i}", alpha=0.8)
                    ax.scatter([x] * len(xs), xs, color="k", s=10, zorder=3)
                k = BUDGETS.index(ln.budget) if ln.budget in BUDGETS[:5] else None
                if key == "oracle_f1" and k is not None and PAPER_T3[method][k] is not None:
                    ax.scatter([x], [PAPER_T3[method][k]], marker="_", s=250, color=f"C{i}", zorder=3)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))], [c.header for c in cols])
        ax.set_xlim(-0.5, max(1, len(cols)) - 0.1)
        ax.set_title(f"qa3 Table 3: {title}", fontsize=10)
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("× 100")
    handles = [Patch(color=f"C{i}", alpha=0.8, label=m) for i, m in enumerate(scores)] + [
        Line2D([], [], color="k", marker="o", linestyle="", markersize=3, label="one seed (bar = mean)"),
        Line2D([], [], color="grey", marker="_", linestyle="", markersize=14, label="paper Table 3 (method's colour)"),
    ]
    axes[1].legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- generated-trained against real-trained qa3 --------------------------------------------------
def generated_section(runs: dict[str, Path], seed: int, out: Path) -> tuple[list[str], dict]:
    real = [n for n in sorted(runs) if method_of(n) == "t_qrag"]
    names = generated_runs(runs)
    gens = {n: {ln: p for (ln, o), p in eval_files(runs[n], seed).items() if not o} for n in names}
    reals = {n: {ln: p for (ln, o), p in eval_files(runs[n], seed).items() if not o} for n in real}
    cols = columns([ln for f in [*gens.values(), *reals.values()] for ln in f])
    rows: dict[str, list[str]] = defaultdict(list)
    diffs: dict[Length, float] = {}

    def cell(xs: list[float]) -> str:
        return f"{mean_std(xs, 3)} [{', '.join(f'{x:.3f}' for x in xs)}]" if xs else DASH

    for ln in cols:
        gp = [f[ln] for f in gens.values() if ln in f]
        rp = [f[ln] for f in reals.values() if ln in f]
        limit = common_limit(gp + rp)
        gs = [score_file(p, limit) for p in gp]
        rs = [score_file(p, limit) for p in rp]
        g, r = [s["fact_em"] for s in gs], [s["fact_em"] for s in rs]
        rows["g"].append(cell(g))
        rows["r"].append(cell(r))
        if g and r:
            diffs[ln] = statistics.fmean(g) - statistics.fmean(r)
        rows["d"].append(f"{diffs[ln]:+.3f}" if ln in diffs else DASH)
        rows["n"].append(str(limit) if g and r else DASH)
        shas = {s["sha"] for s in gs + rs}
        rows["s"].append(DASH if not shas else " / ".join(sorted(short_sha(s) for s in shas)))
    label = ", ".join(names) or GENERATED_QA3
    lines = [
        f"qa3 fact EM (fixed budget) on the real test file: `{label}` (trained on generated qa3) "
        f"against the real-trained Q-RAG seeds ({', '.join(real) or DASH}), mean ± population std [per seed], "
        f"on the samples every run holds. {length_note(cols)}",
        "",
        "| | " + " | ".join(c.header for c in cols) + " |",
        "|---|" + "---|" * len(cols),
        f"| {GENERATED_QA3}* fact EM | " + " | ".join(rows["g"]) + " |",
        "| t_qrag_s* fact EM | " + " | ".join(rows["r"]) + " |",
        f"| {GENERATED_QA3}* − t_qrag mean | " + " | ".join(rows["d"]) + " |",
        "| samples | " + " | ".join(rows["n"]) + " |",
        "| test data sha256 (one = same file) | " + " | ".join(rows["s"]) + " |",
    ]
    if diffs:
        worst = min(diffs.values())
        lines += [
            "",
            f"Largest shortfall of the generated-trained run: {worst:+.3f} fact EM (target: ≥ −0.03, docs/REPRODUCE.md).",
        ]
    (out / "generated.md").write_text("\n".join(lines) + "\n")
    return lines, diffs


# -- decoy pick-ups (generated qa3 files) ---------------------------------------------------------
PICK_UP = re.compile(r"\b(got|grabbed|picked up|took) the (\w+)")


def has_decoy(smp: Any) -> bool:
    """A bAbI qa3 sample whose asked object is picked up again, later in the story than the pick-up
    among its supporting facts (the object's last move, which the question asks about, came before)."""
    obj = re.search(r"the (\w+) before", smp.question).group(1)
    picks = [i for i, f in enumerate(smp.facts) if (m := PICK_UP.search(f)) and m.group(2) == obj]
    gold = [i for i in smp.references_idx if PICK_UP.search(smp.facts[i])]
    return bool(gold) and max(picks) > gold[0]


def decoy_flags(samples: Sequence[Any]) -> dict[tuple[str, str, tuple[str, ...]], bool]:
    """{(question, answer, sorted supporting sentences): has a decoy pick-up}, the key an evaluation
    record can be matched by; keys that occur with both flags are left out (ambiguous)."""
    flags: dict[tuple[str, str, tuple[str, ...]], set[bool]] = defaultdict(set)
    for smp in samples:
        key = (smp.question.strip(), smp.answer, tuple(sorted(smp.facts[i] for i in smp.references_idx)))
        flags[key].add(has_decoy(smp))
    return {k: v.pop() for k, v in flags.items() if len(v) == 1}


def decoy_section(runs: dict[str, Path], qa3: str | None, babi: Path, seed: int, out: Path) -> list[str]:
    from envs.data.babi import load_babi_file

    samples = load_babi_file(babi)
    flags = decoy_flags(samples)
    n_decoy = sum(has_decoy(smp) for smp in samples)
    lines = [
        f"qa3 test file `{babi.name}`: {n_decoy} of {len(samples)} questions ({100 * n_decoy / len(samples):.0f} %) "
        "have a decoy pick-up. Records are matched to questions by (question, answer, supporting "
        "sentences); `unmatched` = records whose key is ambiguous in the file.",
        "",
        "| run | length | fact EM, no decoy (n) | fact EM, decoy (n) | unmatched |",
        "|---|---|---|---|---|",
    ]
    qa3_runs = [n for n in runs if n == qa3 or method_of(n) or n in generated_runs(runs)]
    for name in qa3_runs:
        for (ln, oracle), path in sorted(eval_files(runs[name], seed).items(), key=lambda kv: kv[0][0].sort_key()):
            if oracle or ln.budget not in ("1K", "32K"):
                continue
            split: dict[object, list[float]] = defaultdict(list)
            for r in read_jsonl(path):
                key = (r["question"].strip(), r["answer"], tuple(sorted(r["sf_texts"])))
                split[flags.get(key)].append(fact_metrics(r["pred_idx"], r["sf_idx"])["em"])
            cell = lambda xs: f"{statistics.fmean(xs):.2f} ({len(xs)})" if xs else DASH  # noqa: E731
            lines.append(f"| {name} | {ln.header} | {cell(split[False])} | {cell(split[True])} | {len(split[None])} |")
    (out / "qa3_decoys.md").write_text("\n".join(lines) + "\n")
    return lines


def is_run(p: Path) -> bool:
    """A run folder (not the logs/ or report/ folder beside the runs)."""
    return p.is_dir() and (any((p / n).is_file() for n in ("config.yaml", "metrics.jsonl")) or bool(eval_files(p)))


def pick_qa3(runs: dict[str, Path], qa3: str | None) -> str | None:
    """The qa3 length-grid run: --qa3, else t_qrag_s1 (round 3 on), else s_D (round 2)."""
    if qa3:
        return qa3
    return next((n for n in ("t_qrag_s1", "s_D") if n in runs), None)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="folder holding the round's run folders")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--qa3", help="run used as the qa3 retriever of the length table (default: t_qrag_s1, else s_D)")
    ap.add_argument("--seed", type=int, default=42, help="evaluation seed of the files read (default 42)")
    ap.add_argument("--babi", type=Path, help="a bAbI qa3 test file: also write the decoy analysis (qa3_decoys.md)")
    args = ap.parse_args(argv)
    if not args.runs.is_dir():
        raise SystemExit(f"error: {args.runs} is not a folder")
    runs = {p.name: p for p in sorted(args.runs.iterdir()) if is_run(p)}
    if not runs:
        raise SystemExit(f"error: no run folders in {args.runs}")
    if args.qa3 and args.qa3 not in runs:
        raise SystemExit(f"error: --qa3 {args.qa3}: no such run folder in {args.runs}")
    qa3 = pick_qa3(runs, args.qa3)
    args.out.mkdir(parents=True, exist_ok=True)
    read_jsonl.cache_clear()
    score_file.cache_clear()
    try:
        curves = curves_section(runs, args.out)
        lengths, checks, table = lengths_section(runs, qa3, args.seed, args.out)
        t3, scores = table3_section(runs, qa3, args.seed, args.out)
        gen, diffs = generated_section(runs, args.seed, args.out)
        decoys = decoy_section(runs, qa3, args.babi, args.seed, args.out) if args.babi else []
        oracle_check = []
        for task, fixed, oracle in checks:
            mine, real = score_file(fixed)["oracle_f1"], score_file(oracle)["fact_f1"]
            oracle_check.append({"task": task, "file": oracle.name, "post_hoc": mine, "oracle_eval": real})
    except ReportError as e:
        raise SystemExit(f"error: {e}") from None
    print("\n".join(curves + [""] + lengths + [""] + t3 + [""] + gen + [""] + decoys))
    print("oracle_check:", json.dumps(oracle_check))
    return {
        "runs": len(runs),
        "qa3": qa3,
        "oracle_check": oracle_check,
        "lengths": table,
        "table3": scores,
        "generated_minus_real": diffs,
    }


if __name__ == "__main__":
    main()
