"""Round 10's lease (experiments/round10/lease.env, a 2-GPU machine): every plan it names exists, every training line
composes and passes the training checks, run names are unique, the GPU column is a card of the 2-GPU machine and no
card holds more than 10 runs; every evaluation names a run the lease trains, composes over that run's config as
eval_retriever.py composes it, and writes a file no other evaluation of the lease writes; the qa3 plans are what
their headers' commands write, and each setting is the recipe at its step size."""

from __future__ import annotations

import shlex
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, compose_cfg, read_plan

R10 = ROOT / "experiments" / "round10"
EXP = ROOT / "experiments"
LENGTH = {  # scripts/launch_evals.sh: a chain's length column as overrides, per #@length_unit
    "tokens": lambda n: ["envs.length_unit=tokens", f"envs.num_tokens={n}"],
    "split": lambda n: [f"envs.test_split=test{n}"],
    "none": lambda n: [],
}
CARDS = {"0", "1"}
LEASE = ("lease.env", "lease_1m.env", "lease_draw44.env", "lease_l128.env")  # the order they ran in
WAVE = 20
STEP_SIZE = {"ctrl": 20, "d100": 100, "d200": 200}  # the qa3 settings: the preset's step size, and the two finer ones
QA3_PLANS = ("qa3", "ctrl")  # seed_plan.py's <out> of each


def settings(name: str) -> dict[str, list[str]]:
    """A settings file as scripts/lease.sh reads it (bash): RUNS, TRAIN_PLANS and EVAL_PLANS word-split, the JOBS
    arrays."""
    script = (
        'set -a; . "$1"; printf "%s\\0" "$RUNS"; printf "\\0"; printf "%s\\0" $TRAIN_PLANS; printf "\\0";'
        ' printf "%s\\0" $EVAL_PLANS; printf "\\0"; printf "%s\\0" "${JOBS_SETUP[@]}"; printf "\\0";'
        ' printf "%s\\0" "${JOBS_EVAL[@]}"'
    )
    out = subprocess.run(
        ["bash", "-c", script, "-", str(R10 / name)], capture_output=True, text=True, check=True
    ).stdout
    groups = out.split("\0\0")
    keys = ("RUNS", "TRAIN_PLANS", "EVAL_PLANS", "JOBS_SETUP", "JOBS_EVAL")
    return {k: [x for x in g.split("\0") if x] for k, g in zip(keys, groups)}


def entries(name: str, key: str) -> list[tuple[Path, str]]:
    """(plan file, run folder) of each TRAIN_PLANS / EVAL_PLANS entry (`<plan>:<folder>`, else RUNS)."""
    s = settings(name)
    out = []
    for e in s[key]:
        plan, _, folder = e.partition(":")
        out.append((ROOT / plan, folder or s["RUNS"][0]))
    return out


def trained(names: tuple[str, ...] = LEASE) -> dict[str, dict[str, tuple[list[str], list[str], int]]]:
    """{folder: {run: (#@common overrides, own overrides, gpu)}} of every training plan of these settings files."""
    out: dict[str, dict[str, tuple[list[str], list[str], int]]] = {}
    for name in names:
        for plan, folder in entries(name, "TRAIN_PLANS"):
            common, runs = read_plan(plan)
            gpus = {ln.split()[0]: int(ln.split()[1]) for ln in plan.read_text().splitlines() if ln and ln[0] != "#"}
            for run, own in runs.items():
                assert run not in out.setdefault(folder, {}), f"{run} twice in {folder}"
                out[folder][run] = (common, own, gpus[run])
    return out


def eval_lines() -> list[tuple[str, str, list[str], str]]:
    """(folder, run, overrides as launch_evals.sh hands them to eval_retriever.py, plan) of every chain's
    evaluation in both settings files: one per length of the line."""
    out = []
    for plan, folder in (e for name in LEASE for e in entries(name, "EVAL_PLANS")):
        text = plan.read_text()
        unit = next((ln.split()[1] for ln in text.splitlines() if ln.startswith("#@length_unit")), "tokens")
        for line in text.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            run, gpu, samples, lengths, *rest = line.split(maxsplit=4)
            assert gpu in CARDS, line
            for n in lengths.split(",") if unit != "none" else ["-"]:
                ov = [
                    *LENGTH[unit](n),
                    f"num_samples={samples}",
                    "progress_bar=false",
                    *shlex.split(rest[0] if rest else ""),
                ]
                out.append((folder, run, ov, plan.name))
    return out


def made_by(path: Path) -> str:
    """The command a plan's header says wrote its lines."""
    return next(ln.split("# made by: ", 1)[1] for ln in path.read_text().splitlines() if ln.startswith("# made by: "))


@pytest.mark.parametrize("name", LEASE)
def test_settings_name_files_that_exist(name):
    s = settings(name)
    assert s["RUNS"] == ["runs/round10"] and not s["JOBS_SETUP"] and not s["JOBS_EVAL"]
    assert bool(s["TRAIN_PLANS"]) == (name == "lease.env")  # the later files only evaluate lease.env's runs
    for key in ("TRAIN_PLANS", "EVAL_PLANS"):
        assert all(plan.is_file() for plan, _ in entries(name, key)), key


def test_the_wave_fits_the_machine():
    """GPUs 0-1, at most 10 runs a card (round 8: 10 held 131-135 GB of an H200's 143)."""
    cards = Counter(gpu for runs in trained().values() for _, _, gpu in runs.values())
    assert set(cards) == {0, 1} and max(cards.values()) <= 10 and sum(cards.values()) == WAVE


def test_every_training_line_composes_and_passes_the_checks():
    from rl.run.validate import check_training

    for folder, runs in trained().items():
        for name, (common, own, _) in runs.items():
            cfg = compose_cfg(common + own)
            check_training(cfg)
            assert any(o.startswith("seed=") for o in own), (folder, name)


@pytest.mark.parametrize("out", QA3_PLANS)
def test_qa3_plans_are_what_their_commands_write(out, tmp_path):
    """scripts/seed_plan.py, run as each file's header says, writes these lines (cards dealt as it deals them)."""
    from tests.conftest import load_script

    argv = shlex.split(made_by(R10 / f"{out}_train.txt").removeprefix("python scripts/seed_plan.py "))
    assert argv[0] == f"experiments/round10/{out}" and made_by(R10 / f"{out}_eval.txt") == made_by(
        R10 / f"{out}_train.txt"
    )
    load_script("seed_plan").main([str(tmp_path / out), *argv[1:]])
    for kind in ("train", "eval"):
        mine = (R10 / f"{out}_{kind}.txt").read_text().splitlines()
        theirs = (tmp_path / f"{out}_{kind}.txt").read_text().splitlines()
        assert [ln for ln in mine if "# made by: " not in ln] == [ln for ln in theirs if "# made by: " not in ln]


def test_draw_plan_is_what_its_command_writes():
    cmd = made_by(R10 / "draw_eval.txt")
    made = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = [ln for ln in (R10 / "draw_eval.txt").read_text().splitlines() if not ln.startswith("#")]
    assert lines == made.splitlines()


def test_qa3_settings_are_the_recipe_at_their_step_size():
    """Every qa3 run is the preset (round 9's isoA: alpha0 0.01, the soft target at 5x, 2 000 steps, E 16) with only
    envs.step_size changed; the control composes exactly what round 9 ran as w1_isoA_s<k>."""
    common9, runs9 = read_plan(EXP / "round9" / "qa3_train.txt")
    runs = {n: v for n, v in trained(("lease.env",))["runs/round10"].items() if n.startswith("w1_")}
    assert Counter(n.split("_")[1] for n in runs) == {"ctrl": 4, "d100": 8, "d200": 8}
    for name, (common, own, _) in runs.items():
        cfg = OmegaConf.to_container(compose_cfg(common + own), resolve=True)
        hp = cfg["algo"]["pqn"]["hyperparams"]
        assert (hp["alpha"], hp["target_alpha_scale"], cfg["steps_count"], cfg["envs_parallel"]) == (
            0.01,
            5.0,
            2000,
            16,
        )
        assert (cfg["envs"]["task"], cfg["envs"]["step_size"]) == (
            "qa3_three-supporting-facts",
            STEP_SIZE[name.split("_")[1]],
        )
        if name.startswith("w1_ctrl_"):
            seed = name.rsplit("_s", 1)[1]
            assert compose_cfg(common + own) == compose_cfg(common9 + runs9[f"w1_isoA_s{seed}"]), name


def test_qa3_evaluations_are_the_proposed_ones():
    """1K and 32K (200 questions) for every qa3 run, a second 32K draw (eval seed 43) for every run, 128K for seeds
    1-4 of each setting (experiments/qa3_32k/README.md's proposal); then, with the lease's time left, 1M (100
    questions) for seeds 1-4 of each setting, a third 32K draw (eval seed 44) and 128K for seeds 5-8 of d100 and
    d200."""
    runs = [n for n in trained(("lease.env",))["runs/round10"] if n.startswith("w1_")]
    got = Counter()
    for folder, run, ov, _plan in eval_lines():
        if run in runs:
            seed = next((o.split("=")[1] for o in ov if o.startswith("seed=")), "42")
            tokens = next(o.split("=")[1] for o in ov if o.startswith("envs.num_tokens="))
            assert f"num_samples={100 if tokens == '1000000' else 200}" in ov and folder == "runs/round10", (run, ov)
            got[run, tokens, seed] += 1
    want = Counter({(r, n, "42"): 1 for r in runs for n in ("1000", "32000")})
    want.update({(r, "32000", "43"): 1 for r in runs})
    want.update({(r, "128000", "42"): 1 for r in runs if int(r.rsplit("_s", 1)[1]) <= 4 or "_ctrl_" not in r})
    want.update({(r, "1000000", "42"): 1 for r in runs if int(r.rsplit("_s", 1)[1]) <= 4})
    want.update({(r, "32000", "44"): 1 for r in runs})
    assert got == want


@pytest.fixture(scope="module")
def lease_runs(tmp_path_factory) -> Path:
    """The lease's run folders as config.yaml alone (what an evaluation merges), under <root>/runs/..."""
    from rl.run.run_folder import write_config

    root = tmp_path_factory.mktemp("lease")
    for folder, runs in trained().items():
        for name, (common, own, _) in runs.items():
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


def test_every_evaluation_composes_and_writes_a_file_of_its_own(lease_runs):

    runs = trained()
    files: list[str] = []
    for folder, run, ov, plan in eval_lines():
        assert run in runs[folder], (plan, run, folder)
        cfg = composed(lease_runs, f"{folder}/{run}", ov)
        files.append(written(cfg, lease_runs, f"{folder}/{run}"))
        if plan in ("qa3_eval.txt", "ctrl_eval.txt", "draw_eval.txt"):  # at the run's own step size, T and seed's name
            setting = run.split("_")[1]
            assert (int(cfg.envs.step_size), int(cfg.envs.max_steps)) == (STEP_SIZE[setting], 6), files[-1]
            assert files[-1] == f"{folder}/{run}/eval_seed{int(cfg.seed)}_nt{int(cfg.envs.num_tokens)}.jsonl"
    assert len(files) == len(set(files)), [f for f, k in Counter(files).items() if k > 1]
    assert {f"runs/round10/{r}/eval_seed43_nt32000.jsonl" for r in runs["runs/round10"] if r.startswith("w1_")} < set(
        files
    )  # the second draw beside seed 42's file, not over it
