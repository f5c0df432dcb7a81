"""A lease's settings file and plans as scripts/lease.sh, launch_plan.sh and launch_evals.sh read them, and an
evaluation line composed as eval_retriever.py composes it, and a plan file against the command its header says wrote
it: the helpers of the round plan tests (tests/recipes/test_round10_plans.py, test_round11_plans.py,
test_round12_plans.py, test_mpnet_plan.py, test_niah_plan.py, test_qa3_sparse_plans.py, test_qa3_late_plans.py)."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections import Counter
from pathlib import Path

from tests.conftest import ROOT, compose_cfg, load_script, read_plan

LENGTH = {  # scripts/launch_evals.sh: a chain's length column as overrides, per #@length_unit
    "tokens": lambda n: ["envs.length_unit=tokens", f"envs.num_tokens={n}"],
    "sentences": lambda n: [f"envs.num_sentences={n}"],
    "split": lambda n: [f"envs.test_split=test{n}"],
    "none": lambda n: [],
}
BEAM_SCRIPT = "$PYTHON experiments/table2/beam_path_scores.py"
KEYS = ("RUNS", "TRAIN_PLANS", "EVAL_PLANS", "JOBS_SETUP", "JOBS_EVAL", "JOBS_START")
MADE_BY = "# made by: "  # a generated plan's header line: the command that wrote it, run from the repository root
SEED_PLAN = "python scripts/seed_plan.py "


def settings(path: Path) -> dict[str, list[str]]:
    """A settings file as scripts/lease.sh reads it (bash): RUNS, TRAIN_PLANS and EVAL_PLANS word-split, the JOBS
    arrays (empty where the file has none)."""
    script = (
        'set -a; . "$1"; printf "%s\\0" "$RUNS"; printf "\\0"; printf "%s\\0" $TRAIN_PLANS; printf "\\0";'
        ' printf "%s\\0" $EVAL_PLANS; printf "\\0"; printf "%s\\0" "${JOBS_SETUP[@]}"; printf "\\0";'
        ' printf "%s\\0" "${JOBS_EVAL[@]}"; printf "\\0"; printf "%s\\0" "${JOBS_START[@]}"'
    )
    out = subprocess.run(["bash", "-c", script, "-", str(path)], capture_output=True, text=True, check=True).stdout
    return {k: [x for x in g.split("\0") if x] for k, g in zip(KEYS, out.split("\0\0"))}


def entries(path: Path, key: str) -> list[tuple[Path, str]]:
    """(plan file, run folder) of each TRAIN_PLANS / EVAL_PLANS entry (`<plan>:<folder>`, else RUNS)."""
    s = settings(path)
    out = []
    for e in s[key]:
        plan, _, folder = e.partition(":")
        out.append((ROOT / plan, folder or s["RUNS"][0]))
    return out


def trained(path: Path) -> dict[str, dict[str, tuple[list[str], list[str], int]]]:
    """{folder: {run: (#@common overrides, own overrides, gpu)}} of every training plan of a settings file."""
    out: dict[str, dict[str, tuple[list[str], list[str], int]]] = {}
    for plan, folder in entries(path, "TRAIN_PLANS"):
        common, runs = read_plan(plan)
        gpus = {ln.split()[0]: int(ln.split()[1]) for ln in plan.read_text().splitlines() if ln and ln[0] != "#"}
        for run, own in runs.items():
            assert run not in out.setdefault(folder, {}), f"{run} twice in {folder}"
            out[folder][run] = (common, own, gpus[run])
    return out


def folder_runs(path: Path, folder: str) -> dict[str, tuple[list[str], list[str], int]]:
    """{run: (#@common overrides, own overrides, gpu)} of a settings file whose training plans all train into
    ``folder``."""
    by_folder = trained(path)
    assert list(by_folder) == [folder], list(by_folder)
    return by_folder[folder]


def setting(run: str) -> str:
    """The setting of a seed-plan run, named w<wave>_<setting>_s<seed> by scripts/seed_plan.py."""
    return run.split("_")[1]


def seed(run: str) -> int:
    """The training seed of a seed-plan run, named w<wave>_<setting>_s<seed> by scripts/seed_plan.py."""
    return int(run.rsplit("_s", 1)[1])


def eval_lines(path: Path) -> list[tuple[str, str, list[str], str, str]]:
    """(folder, run, overrides as launch_evals.sh hands them to eval_retriever.py, plan, gpu) of every chain's
    evaluation in a settings file: one per length of the line."""
    out = []
    for plan, folder in entries(path, "EVAL_PLANS"):
        text = plan.read_text()
        unit = next((ln.split()[1] for ln in text.splitlines() if ln.startswith("#@length_unit")), "tokens")
        for line in text.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            run, gpu, samples, lengths, *rest = line.split(maxsplit=4)
            for n in lengths.split(",") if unit != "none" else ["-"]:
                ov = [
                    *LENGTH[unit](n),
                    f"num_samples={samples}",
                    "progress_bar=false",
                    *shlex.split(rest[0] if rest else ""),
                ]
                out.append((folder, run, ov, plan.name, gpu))
    return out


def eval_key(ov: list[str]) -> tuple[str, str, str, str]:
    """What an evaluation line's overrides (eval_lines) ask: (length: the token budget, or ``S<n>`` in sentence
    mode; eval seed, 42 unless set; num_samples; ``last`` for model_last.pt, else ``best``)."""
    es = next((o.split("=")[1] for o in ov if o.startswith("seed=")), "42")
    size = next(o.split("=")[1] for o in ov if o.startswith(("envs.num_tokens=", "envs.num_sentences=")))
    n = next(o.split("=")[1] for o in ov if o.startswith("num_samples="))
    return (size if "envs.length_unit=tokens" in ov else f"S{size}", es, n, "last" if "use_last=true" in ov else "best")


def beam_lines(path: Path) -> list[tuple[str, str, list[str]]]:
    """(gpu, run folder path as written, overrides) of a beam_eval.txt's commands."""
    out = []
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        gpu, rest = line.split(" ", 1)
        assert rest.startswith(BEAM_SCRIPT + " "), line
        ov = shlex.split(rest[len(BEAM_SCRIPT) :])
        run_path = next(o.split("=", 1)[1] for o in ov if o.startswith("pretrained_path="))
        out.append((gpu, run_path, ov))
    return out


def assert_wave_fits(path: Path, wave: int, cards: set[int] = frozenset({0, 1})) -> None:
    """The training plans of a settings file hold ``wave`` runs on exactly ``cards``, at most 10 a card (round 8: 10
    qa3 runs held 131-135 GB of an H200's 143)."""
    load = Counter(gpu for runs in trained(path).values() for _, _, gpu in runs.values())
    assert set(load) == set(cards) and max(load.values()) <= 10 and sum(load.values()) == wave, load


def assert_training_lines_pass(path: Path, recipe: list[str] | None = None) -> None:
    """Every training line of a settings file composes (Hydra) and passes rl/run/validate.check_training, and names
    its seed. With ``recipe``: every plan's common overrides are exactly ``recipe`` and each line's first override is
    its run name's seed."""
    from rl.run.validate import check_training

    for folder, runs in trained(path).items():
        for name, (common, own, _) in runs.items():
            check_training(compose_cfg(common + own))
            assert any(o.startswith("seed=") for o in own), (folder, name)
            if recipe is not None:
                assert common == recipe and own[0] == f"seed={seed(name)}", (folder, name)


def assert_settings_evaluate_one_wave(path: Path, folder: str) -> None:
    """A settings file of a one-wave lease: its runs go to ``folder``, it has no setup or evaluation jobs, only
    lease.env (or lease_x<cards>.env, a layout of its own) trains (the other files evaluate its runs), and every plan it names is a file
    beside it."""
    s = settings(path)
    assert s["RUNS"] == [folder] and not s["JOBS_SETUP"] and not s["JOBS_EVAL"]
    assert bool(s["TRAIN_PLANS"]) == bool(re.fullmatch(r"lease(_x\d+)?\.env", path.name)), path.name
    for key in ("TRAIN_PLANS", "EVAL_PLANS"):
        assert all(plan.is_file() and plan.parent == path.parent for plan, _ in entries(path, key)), key


def write_runs(root: Path, runs: dict[str, dict[str, tuple[list[str], list[str], int]]]) -> Path:
    """The lease's run folders as config.yaml alone (what an evaluation merges), under <root>/<folder>/<run>."""
    from rl.run.run_folder import write_config

    for folder, by_name in runs.items():
        for name, (common, own, _) in by_name.items():
            (root / folder / name).mkdir(parents=True)
            write_config(root / folder / name, compose_cfg(common + own))
    return root


def composed(root: Path, run_path: str, ov: list[str]):
    """The evaluation config eval_retriever.py would run: the line's overrides over the run's config.yaml."""
    from rl.run.eval_config import merge_eval_config

    ov = [o for o in ov if not o.startswith("pretrained_path=")]
    return merge_eval_config(compose_cfg([f"pretrained_path={root / run_path}", *ov], "testing"))


def written(cfg, root: Path, run_path: str) -> str:
    """The evaluation file a composed config writes, relative to the lease root."""
    from rl.run.eval_records import eval_stem

    out = str(cfg.output_dir) if cfg.output_dir else str(root / run_path)
    return str(Path(out.replace(f"{root}/", "")) / f"{eval_stem(cfg)}.jsonl")


def readme_calls(path: Path) -> list[str]:
    """The lines of a README's code blocks that call scripts/lease.sh."""
    out, inside = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and "scripts/lease.sh" in line:
            out.append(line)
    return out


def assert_cards_hold(
    runs: dict[str, tuple[list[str], list[str], int]], per_card: dict[str, int], weight: dict[str, float]
) -> None:
    """Cards 0 and 1 each hold ``per_card[setting]`` runs of every setting, together at most 10 recipe runs' worth of
    memory when a run of a setting counts as ``weight[setting]`` of them (round 8: 10 qa3 runs held 131-135 GB of an
    H200's 143)."""
    load = Counter((gpu, setting(name)) for name, (_, _, gpu) in runs.items())
    assert load == Counter({(g, s): n for g in (0, 1) for s, n in per_card.items()}), load
    for card in (0, 1):
        assert sum(weight[s] * n for (g, s), n in load.items() if g == card) <= 10, card


def made_by(path: Path) -> str:
    """The command a plan's header says wrote its lines (its first "# made by: " line)."""
    return next(ln.split(MADE_BY, 1)[1] for ln in path.read_text().splitlines() if ln.startswith(MADE_BY))


def assert_seed_plans_rewrite(folder: Path, out: str, tmp_path: Path) -> None:
    """scripts/seed_plan.py, run as <folder>/<out>_train.txt's header says (the same command as <out>_eval.txt's,
    writing <folder>/<out>), writes both plans' lines, cards dealt as it deals them; only the header line may differ."""
    argv = shlex.split(made_by(folder / f"{out}_train.txt").removeprefix(SEED_PLAN))
    assert argv[0] == (folder / out).relative_to(ROOT).as_posix(), argv[0]
    assert made_by(folder / f"{out}_eval.txt") == made_by(folder / f"{out}_train.txt")
    load_script("seed_plan").main([str(tmp_path / out), *argv[1:]])
    for kind in ("train", "eval"):
        mine = (folder / f"{out}_{kind}.txt").read_text().splitlines()
        theirs = (tmp_path / f"{out}_{kind}.txt").read_text().splitlines()
        assert [ln for ln in mine if MADE_BY not in ln] == [ln for ln in theirs if MADE_BY not in ln], kind


def assert_plan_is_its_command_output(path: Path) -> None:
    """A plan written by a shell command (awk over other plans): its lines, all but the # ones, are what the command
    in its header prints when run from the repository root."""
    made = subprocess.run(["bash", "-c", made_by(path)], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert [ln for ln in path.read_text().splitlines() if not ln.startswith("#")] == made.splitlines()
