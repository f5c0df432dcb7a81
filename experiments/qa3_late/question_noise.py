"""How much of a seed's 1K score is the 200 test questions, and the long stories without a run (README.md, "Results").

    python experiments/qa3_late/question_noise.py experiments/qa3_late/runs.tar.xz --settings ctrl,late \
        --without w1_late_s7 > experiments/qa3_late/question_noise.md
    python experiments/qa3_late/question_noise.py experiments/round9/runs.tar.xz --settings isoA

Per run: oracle-stop fact F1 x100 at 1K (eval seed 42, best checkpoint), its standard error over the questions, and
the share of 4 000 question resamples in which it lands under 95 (the convergence threshold), so a seed that reads
94 or 95 on 200 questions is seen as the near-miss it is. Per setting: the spread of the seed means against the
question noise each carries (sqrt(var - mean SE^2): the seeds' own spread, once question noise is taken out). Then
the 27 long stories (the 32K test questions the 1K budget leaves out) at each 32K draw, with the runs named by
--without left out (post hoc: say so wherever it is quoted).
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import seed_report as sr  # noqa: E402

THRESHOLD = 95.0


def scores(run: Path, length: str, eval_seed: int = 42) -> dict[int, float]:
    path = sr.eval_path(run, sr.eval_stem(length, eval_seed))
    return {q: v[0] for q, v in sr.question_scores(path, key="id").items()} if path else {}


def seed_rows(runs: list[Path], rng: np.random.Generator) -> list[tuple[str, float, float, float]]:
    rows = []
    for run in runs:
        x = np.array(list(scores(run, "1K").values()))
        resampled = x[rng.integers(0, len(x), (4000, len(x)))].mean(axis=1)
        rows.append((run.name, x.mean(), x.std(ddof=1) / np.sqrt(len(x)), float((resampled < THRESHOLD).mean())))
    return rows


def long_story_means(runs: list[Path]) -> list[float | None]:
    """Per 32K draw (eval seeds 42-44): the mean over runs of each run's mean on the questions 1K does not hold;
    None for a draw the runs were not evaluated on."""
    out: list[float | None] = []
    for es in (42, 43, 44):
        per_run = []
        for run in runs:
            short, long = set(scores(run, "1K")), scores(run, "32K", es)
            if long:
                per_run.append(np.mean([v for q, v in long.items() if q not in short]))
        out.append(float(np.mean(per_run)) if per_run else None)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archive", type=Path, help="a round's runs.tar.xz")
    ap.add_argument("--settings", required=True, help="comma-separated settings (run names w1_<setting>_s<k>)")
    ap.add_argument("--without", default="", help="comma-separated runs left out of the long-story means")
    args = ap.parse_args(argv)
    left_out = set(filter(None, args.without.split(",")))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(args.archive) as tar:
            tar.extractall(tmp, filter="data")
        root = next(p.parent.parent for p in Path(tmp).rglob("config.yaml"))  # the folder holding the runs
        print(f"# Question noise of {args.archive} at 1K (200 questions, eval seed 42)\n")
        print("| run | 1K | SE over questions | resamples under 95 |\n|---|---|---|---|")
        summary = []
        for setting in args.settings.split(","):
            runs = sorted(root.glob(f"w*_{setting}_s*"), key=lambda p: int(p.name.rsplit("_s", 1)[1]))
            if not runs:
                raise SystemExit(f"{args.archive}: no run of setting {setting!r}")
            rows = seed_rows(runs, rng)
            for name, mean, se, under in rows:
                print(f"| {name} | {mean:.1f} | {se:.2f} | {100 * under:.0f} % |")
            means, ses = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
            own = np.sqrt(max(means.var(ddof=1) - (ses**2).mean(), 0.0))
            kept = [r for r in runs if r.name not in left_out]
            summary.append((setting, len(rows), means, ses, own, len(kept), long_story_means(kept)))
        print(
            "\n| setting | seeds | 1K mean | std of seed means | mean SE | seeds' own std | long stories 32K: runs, "
            "draws 42 / 43 / 44, mean |\n|---|---|---|---|---|---|---|"
        )
        for setting, n, means, ses, own, kept, longs in summary:
            draws = " / ".join("–" if v is None else f"{v:.1f}" for v in longs)
            have = [v for v in longs if v is not None]
            print(
                f"| {setting} | {n} | {means.mean():.2f} | {means.std(ddof=1):.2f} | {ses.mean():.2f} | {own:.2f} "
                f"| {kept}: {draws}, {np.mean(have):.1f} over {len(have)} |"
            )
        if left_out:
            print(f"\nLong-story means without {', '.join(sorted(left_out))} (post hoc).")


if __name__ == "__main__":
    main()
