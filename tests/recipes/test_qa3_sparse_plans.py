"""experiments/qa3_sparse/'s lease (lease.env, then lease_l128.env and lease_1m.env with the time left; a 2-GPU machine): every plan
it names exists, every training line composes and passes the training checks, the GPU column is a card of the 2-GPU
machine and the cards hold what the README's memory and time rule allows; the plans are what their headers' commands
write; every run is the qa3 recipe with only envs.num_sentences changed (the control is round 10's); every run gets
1K and 32K at eval seeds 42-44 and the sentence-mode S100 evaluation (seeds 1-4 also 128K), each composing over its
run's config as eval_retriever.py composes it and writing a file no other evaluation writes; step_cost.py's
haystack measurement runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT, compose_cfg, load_script, read_plan
from tests.recipes.lease_plans import (
    assert_cards_hold,
    assert_plan_is_its_command_output,
    assert_seed_plans_rewrite,
    assert_settings_evaluate_one_wave,
    assert_training_lines_pass,
    composed,
    eval_key,
    eval_lines,
    folder_runs,
    readme_calls,
    seed,
    setting,
    trained,
    write_runs,
    written,
)

HERE = ROOT / "experiments" / "qa3_sparse"
LEASE = (HERE / "lease.env", HERE / "lease_l128.env", HERE / "lease_1m.env")  # the order they ran in
RECIPE = "experiment=offline_babilong_qa3"
SIZES = {"ctrl": 100, "sp25": [100, 100, 100, 1000]}  # each setting's envs.num_sentences
SEEDS = {"ctrl": 4, "sp25": 6}
# The README's rule (section "Memory and time, the rule"): a card holds at most 10 recipe runs (round 8: 131-135 GB of an
# H200's 143), an sp25 run counts as 1.5 of them, and the wave's time bounds the card to 3 sp25 and 2 ctrl runs.
WEIGHT = {"ctrl": 1.0, "sp25": 1.5}
PER_CARD = {"ctrl": 2, "sp25": 3}


def runs() -> dict[str, tuple[list[str], list[str], int]]:
    return folder_runs(LEASE[0], "runs/qa3_sparse")


@pytest.mark.parametrize("lease", LEASE, ids=lambda p: p.name)
def test_settings_name_files_that_exist(lease):
    assert_settings_evaluate_one_wave(lease, "runs/qa3_sparse")


def test_the_wave_fits_the_machine():
    """Cards 0-1; on each, 3 sp25 and 2 ctrl runs: 6.5 recipe runs' worth of memory by the README's rule (≤ 10)."""
    assert_cards_hold(runs(), PER_CARD, WEIGHT)


def test_every_training_line_composes_and_passes_the_checks():
    assert_training_lines_pass(LEASE[0], [RECIPE])


@pytest.mark.parametrize("out", ("sp25", "ctrl"))
def test_seed_plans_are_what_their_commands_write(out, tmp_path):
    """scripts/seed_plan.py, run as each file's header says, writes these lines (cards dealt as it deals them)."""
    assert_seed_plans_rewrite(HERE, out, tmp_path)


@pytest.mark.parametrize("name", ("draw_eval.txt", "s100_eval.txt", "l128_eval.txt", "m1_eval.txt"))
def test_awk_plans_are_what_their_commands_write(name):
    assert_plan_is_its_command_output(HERE / name)
    unit = "sentences" if name == "s100_eval.txt" else "tokens"
    assert f"#@length_unit {unit}" in (HERE / name).read_text().splitlines()


def test_every_run_is_the_recipe_with_only_its_haystack_size_changed():
    """Each run composes exactly what `experiment=offline_babilong_qa3 seed=<k>` composes with envs.num_sentences set
    to its setting's size; the control composes what round 10 ran as w1_ctrl_s<k> (and round 9 as w1_isoA_s<k>)."""
    from omegaconf import open_dict

    common10, runs10 = read_plan(ROOT / "experiments" / "round10" / "ctrl_train.txt")
    got = Counter()
    for name, (common, own, _) in runs().items():
        cfg = compose_cfg(common + own)
        want = compose_cfg([RECIPE, f"seed={seed(name)}"])
        with open_dict(want):
            want.envs.num_sentences = SIZES[setting(name)]
        assert cfg == want, name
        if setting(name) == "ctrl":
            assert cfg == compose_cfg(common10 + runs10[f"w1_ctrl_s{seed(name)}"]), name
        got[setting(name)] += 1
    assert got == SEEDS


def test_evaluations_are_the_planned_ones():
    """Every run: 1K and 32K at eval seed 42, 32K at 43 and 44, S100 (sentence mode, 100 sentences); lease_l128.env:
    128K for seeds 1-4 of each setting; lease_1m.env (added in the lease): 1M for the same runs. 200 questions each,
    100 at 1M."""
    got = Counter()
    for lease in LEASE:
        for folder, run, ov, _plan, _gpu in eval_lines(lease):
            n_q = "num_samples=100" if lease.name == "lease_1m.env" else "num_samples=200"
            assert folder == "runs/qa3_sparse" and n_q in ov, (run, ov)
            got[lease.name, run, *eval_key(ov)[:2]] += 1
    names = list(runs())
    want = Counter({("lease.env", r, n, "42"): 1 for r in names for n in ("1000", "32000", "S100")})
    want.update({("lease.env", r, "32000", es): 1 for r in names for es in ("43", "44")})
    want.update({("lease_l128.env", r, "128000", "42"): 1 for r in names if seed(r) <= 4})
    want.update({("lease_1m.env", r, "1000000", "42"): 1 for r in names if seed(r) <= 4})
    assert got == want


@pytest.fixture(scope="module")
def lease_runs(tmp_path_factory) -> Path:
    return write_runs(tmp_path_factory.mktemp("lease"), trained(LEASE[0]))


def test_every_evaluation_composes_and_writes_a_file_of_its_own(lease_runs):
    """Over its run's config: the recipe's step size and T; token mode at its budget and eval seed, or sentence mode at
    100 sentences on the test split (the S100 file, eval_seed42_ns100.jsonl, beside the token-mode ones)."""
    from envs.data.registry import build_dataset

    files: list[str] = []
    for lease in LEASE:
        for folder, run, ov, plan, gpu in eval_lines(lease):
            assert gpu in {"0", "1"} and run in runs(), (plan, run)
            cfg = composed(lease_runs, f"{folder}/{run}", ov)
            files.append(written(cfg, lease_runs, f"{folder}/{run}"))
            assert (int(cfg.envs.step_size), int(cfg.envs.max_steps), str(cfg.envs.test_split)) == (20, 6, "test")
            if plan == "s100_eval.txt":
                assert (cfg.envs.length_unit, cfg.envs.num_sentences, int(cfg.seed)) == ("sentences", 100, 42)
                assert files[-1] == f"{folder}/{run}/eval_seed42_ns100.jsonl"
                if run == "w1_sp25_s1":  # sentence mode drops no story: test questions 0-199, as at 32K
                    assert build_dataset(cfg.envs, "test", 42).ids[:200] == list(range(200))
            else:
                n, es = int(cfg.envs.num_tokens), int(cfg.seed)
                assert cfg.envs.length_unit == "tokens" and files[-1] == f"{folder}/{run}/eval_seed{es}_nt{n}.jsonl"
    assert len(files) == len(set(files)) == 10 * 5 + 8 + 8, [f for f, k in Counter(files).items() if k > 1]


def test_seed_report_names_every_length_evaluated():
    """scripts/seed_report.py reads each of these evaluations by a length name (S100: eval_seed42_ns100)."""
    report = load_script("seed_report")
    stems = {report.eval_stem(b, es) for b in ("1K", "32K", "128K", "S100") for es in (42, 43, 44)}
    assert {"eval_seed42_ns100", "eval_seed43_nt32000", "eval_seed44_nt32000", "eval_seed42_nt128000"} <= stems


def test_the_readme_calls_name_this_lease():
    """README.md's calls run these settings files on the 2-GPU kind, lease.env's verbs in order, then 128K."""
    text = (HERE / "README.md").read_text()
    calls = readme_calls(HERE / "README.md")
    assert "kind=nvidia-h200-x2" in text
    verbs = [c.split("experiments/qa3_sparse/", 1)[1].split()[:2] for c in calls]
    assert verbs == [
        ["lease.env", "setup"],
        ["lease.env", "parts"],
        ["lease.env", "start"],
        ["lease.env", "watch"],
        ["lease.env", "eval"],
        ["lease_l128.env", "eval"],
        ["lease_1m.env", "eval"],
        ["lease.env", "pack"],
    ]


def test_step_cost_counts_training_haystacks():
    """step_cost.py haystacks on a few training questions: the recipe's 100 chunks (more for a long story), the
    mix's quarter at 1 000, and more MiniLM tokens per haystack for the mix."""
    mod = load_script("step_cost", "experiments/qa3_sparse")
    rec, mix = mod.haystacks(["100", "[100,100,100,1000]"], stride=97)
    assert rec["haystacks"] == mix["haystacks"] == 20 and rec["share_1000_or_more"] == 0.0
    assert 100 <= rec["chunks_mean"] < mix["chunks_mean"] and 0 < mix["share_1000_or_more"] < 1
    assert mix["tokens_x_first"] > 1 and rec["tokens_x_first"] == 1.0


def test_the_time_rule_chose_this_mix():
    """step_cost.py wave over the committed haystack measurement (README.md, "Memory and time, the rule"): round 10's
    wave (10 recipe runs a card) comes out near its measured ~720 s; with 3 runs a card beside 2 ctrl, sp25's runs end
    before lease.env's TIME_LIMIT even at the pessimistic end, and the proposal's [100,1000] after it."""
    mod = load_script("step_cost", "experiments/qa3_sparse")
    cost = HERE / "cost" / "haystacks.jsonl"
    limit = int(
        next(ln.split("=")[1] for ln in (HERE / "lease.env").read_text().splitlines() if ln.startswith("TIME_"))
    )
    ends = {r["num_sentences"]: r["run_ends_s"] for r in mod.wave(cost, PER_CARD["sp25"], PER_CARD["ctrl"])}
    assert ends["[100,100,100,1000]"][1] < limit < ends["[100,1000]"][1] and ends["[100,1000]"][0] < limit
    low, high = next(r["run_ends_s"] for r in mod.wave(cost, 10, 0) if r["num_sentences"] == "100")
    assert low < 720 < high
