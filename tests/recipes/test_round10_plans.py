"""Round 10's lease (experiments/round10/lease.env, then lease_more.env if time is left): every plan they name exists,
every training line composes and passes the training checks, run names are unique in each folder over both files,
the GPU column is a card of the 4-GPU machine and no card holds more than 10 runs of a wave; every evaluation (plan
chains and the beam path scores) names a run the lease trains into that folder, composes over that run's config as
eval_retriever.py composes it, and writes a file no other evaluation of the lease writes; the qa3 plans are what
their headers' commands write, and each setting is the recipe at its step size; the round's other plans are the
older plans' lines they say they are."""

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
ISOA = ["algo.pqn.hyperparams.alpha=0.01", "algo.pqn.hyperparams.target_alpha_scale=5.0"]
LENGTH = {  # scripts/launch_evals.sh: a chain's length column as overrides, per #@length_unit
    "tokens": lambda n: ["envs.length_unit=tokens", f"envs.num_tokens={n}"],
    "split": lambda n: [f"envs.test_split=test{n}"],
    "none": lambda n: [],
}
BEAM_SCRIPT = "$PYTHON experiments/table2/beam_path_scores.py"
CARDS = {"0", "1", "2", "3"}
LEASE = ("lease.env", "lease_more.env")  # the order they run in
WAVE = {"lease.env": 25, "lease_more.env": 16}
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


def beam_lines() -> list[tuple[str, str, list[str]]]:
    """(gpu, run folder path as written, overrides) of beam_eval.txt's commands."""
    out = []
    for line in (R10 / "beam_eval.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        gpu, rest = line.split(" ", 1)
        assert rest.startswith(BEAM_SCRIPT + " "), line
        ov = shlex.split(rest[len(BEAM_SCRIPT) :])
        path = next(o.split("=", 1)[1] for o in ov if o.startswith("pretrained_path="))
        out.append((gpu, path, ov))
    return out


def made_by(path: Path) -> str:
    """The command a plan's header says wrote its lines."""
    return next(ln.split("# made by: ", 1)[1] for ln in path.read_text().splitlines() if ln.startswith("# made by: "))


@pytest.mark.parametrize("name", LEASE)
def test_settings_name_files_that_exist(name):
    s = settings(name)
    assert s["RUNS"] == [{"lease.env": "runs/round10", "lease_more.env": "runs/table2b"}[name]]
    for key in ("TRAIN_PLANS", "EVAL_PLANS"):
        assert all(plan.is_file() for plan, _ in entries(name, key)), key
    for line in s["JOBS_SETUP"] + s["JOBS_EVAL"]:
        for word in shlex.split(line.replace("<(", "( ")):
            if word.startswith(("scripts/", "experiments/")):
                assert (ROOT / word.rstrip(")")).is_file(), word
    beam = [ln for ln in s["JOBS_EVAL"] if "beam_eval.txt" in ln]
    if name == "lease.env":  # the grid here; the beam lines wait for Table 2b's runs
        assert not beam and len(s["JOBS_EVAL"]) == 1 and "niah_eval_grid.py" in s["JOBS_EVAL"][0]
    else:
        assert len(beam) == 4 and all(
            f"CUDA_VISIBLE_DEVICES={g} " in ln and f'"s/^{g} //p"' in ln for g, ln in enumerate(beam)
        )


@pytest.mark.parametrize("name", LEASE)
def test_each_wave_fits_the_machine(name):
    """GPUs 0-3, at most 10 runs a card (round 8: 10 held 131-135 GB of an H200's 143), 40 in all."""
    cards = Counter(gpu for runs in trained((name,)).values() for _, _, gpu in runs.values())
    assert set(cards) <= {0, 1, 2, 3} and max(cards.values()) <= 10 and sum(cards.values()) <= 40
    assert sum(cards.values()) == WAVE[name]


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
    1-4 of each setting (experiments/qa3_32k/README.md's proposal)."""
    runs = [n for n in trained(("lease.env",))["runs/round10"] if n.startswith("w1_")]
    got = Counter()
    for folder, run, ov, _plan in eval_lines():
        if run in runs:
            seed = next((o.split("=")[1] for o in ov if o.startswith("seed=")), "42")
            tokens = next(o.split("=")[1] for o in ov if o.startswith("envs.num_tokens="))
            assert "num_samples=200" in ov and folder == "runs/round10", (run, ov)
            got[run, tokens, seed] += 1
    want = Counter({(r, n, "42"): 1 for r in runs for n in ("1000", "32000")})
    want.update({(r, "32000", "43"): 1 for r in runs})
    want.update({(r, "128000", "42"): 1 for r in runs if int(r.rsplit("_s", 1)[1]) <= 4})
    assert got == want


def test_niah_plan_is_table1_plan_at_the_new_temperatures():
    """niah_train.txt = experiments/niah/plan_train.txt (lines and steps kept) + isoA's two overrides on #@common."""
    old = [ln for ln in (EXP / "niah" / "plan_train.txt").read_text().splitlines() if ln and not ln.startswith("# ")]
    new = [ln for ln in (R10 / "niah_train.txt").read_text().splitlines() if ln and not ln.startswith("# ")]
    assert new == [f"{old[0]} {' '.join(ISOA)}", *old[1:]]
    common, runs = read_plan(R10 / "niah_train.txt")
    assert set(runs) == {"n_s1", "n_s2", "n_s3", "n_noft"}
    for name, own in runs.items():
        cfg = OmegaConf.to_container(compose_cfg(common + own), resolve=True)
        hp = cfg["algo"]["pqn"]["hyperparams"]
        assert (hp["alpha"], hp["target_alpha_scale"], cfg["envs"]["name"], cfg["envs"]["max_steps"]) == (
            0.01,
            5.0,
            "niah",
            4,
        )
        assert cfg["steps_count"] == (0 if name == "n_noft" else 1000)


def test_t_and_stop_lines_are_that_plans_own():
    """The untrained qa3 encoder and its T = 12 chains, as experiments/t_and_stop/ plans them."""
    for mine, theirs in (("tstop_train.txt", "plan_train.txt"), ("tstop_qa3_eval.txt", "plan_eval.txt")):
        lines = [ln for ln in (R10 / mine).read_text().splitlines() if ln and not ln.startswith("# ")]
        assert lines and set(lines) <= set((EXP / "t_and_stop" / theirs).read_text().splitlines()), mine
        assert all(ln.startswith(("#@", "t_noft ")) for ln in lines), mine


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
    from envs.data.registry import build_dataset

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
        if plan == "niah_t8_eval.txt":  # into the grid's cell folder, beside its T = 4 records
            task = str(cfg.envs.task)
            assert (int(cfg.envs.max_steps), int(cfg.num_samples), int(cfg.seed)) == (8, 100, 42)
            assert files[-1] == f"runs/round10/{run}/niah/{task}/eval_seed42_test4k_T8.jsonl"
            assert (ROOT / "data" / "niah" / "ruler_gpt2" / task / "test4k.jsonl.gz").is_file()
        if plan.startswith("tstop_"):
            assert f"_T{int(cfg.envs.max_steps)}" in files[-1] and int(cfg.envs.max_steps) in (5, 8, 12), files[-1]
    chosen = set()
    for gpu, path, ov in beam_lines():
        folder, run = path.rsplit("/", 1)
        assert gpu in CARDS and run in runs[folder], path
        cfg = composed(lease_runs, path, [*ov, "eval.planner=beam", "overwrite=true"])  # as the script composes
        files.append(written(cfg, lease_runs, path))
        assert files[-1].startswith(f"{path}/beam_") and files[-1].endswith("_beam4x3.jsonl"), files[-1]
        data = "musique" if str(cfg.envs.name) == "musique" else "hotpotqa"
        assert Path(str(cfg.envs.data_path)).resolve() == (ROOT / "data" / data).resolve(), path
        if str(cfg.envs.test_split) == "validation":  # the data's own validation file: what the score is chosen on
            assert len(build_dataset(cfg.envs, "validation", 42, 0.0)) == 100
            chosen.add(run)
    assert len(files) == len(set(files)), [f for f, k in Counter(files).items() if k > 1]
    assert {f"runs/round10/{r}/eval_seed43_nt32000.jsonl" for r in runs["runs/round10"] if r.startswith("w1_")} < set(
        files
    )  # the second draw beside seed 42's file, not over it
    beam_runs = {p.rsplit("/", 1)[1] for _, p, _ in beam_lines()}
    assert chosen == beam_runs  # every run scored on test was also scored on validation
