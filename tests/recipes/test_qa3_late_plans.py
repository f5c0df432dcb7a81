"""experiments/qa3_late/'s lease in its two layouts: a 2-GPU machine (lease.env, then lease_l128.env and
lease_1m.env with the time left; 10 late runs) and a 4-GPU one (lease_x4.env, lease_x4_l128.env, lease_x4_1m.env;
10 late runs and 10 of the recipe, `ctrl`, as a same-lease control). Every plan named exists, every training line
composes and passes the training checks, the cards hold what the README says; the plans are what their headers'
commands write; every late run is the qa3 recipe at seeds 1-10 with only late_haystacks set (so its first 800 steps
are the recipe's, and its validation set is qa3_sparse's sp25's at its seed: the one sp25 seed k used for k <= 6,
the one sp25 would draw at seeds 7-10), every ctrl run the recipe at its seed; every run gets 1K and 32K at eval
seeds 42-44 and S100 (seeds 1-6 also 128K and 1M), each composing over its run's config as eval_retriever.py
composes it, untouched by late_haystacks, and writing a file no other evaluation writes; the time model puts the
wave inside TIME_LIMIT."""

from __future__ import annotations

from collections import Counter

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

HERE = ROOT / "experiments" / "qa3_late"
SPARSE = ROOT / "experiments" / "qa3_sparse"
# the settings files of each layout, in the order they run in
LAYOUTS = {
    "x2": (HERE / "lease.env", HERE / "lease_l128.env", HERE / "lease_1m.env"),
    # the last two written in the lease with the time left: 1M and 128K for seeds 7-10 (README.md, "Results")
    "x4": (
        HERE / "lease_x4.env",
        HERE / "lease_x4_l128.env",
        HERE / "lease_x4_1m.env",
        HERE / "lease_x4_1m7.env",
        HERE / "lease_x4_l128s7.env",
    ),
}
LEASE = LAYOUTS["x2"]
RECIPE = "experiment=offline_babilong_qa3"
LATE = {"from_step": 800, "num_sentences": [100, 100, 100, 1000]}
# issue 43 asks for >= 9 of 10 converged; on 2 cards no same-lease control (README.md, "Seeds"), on 4 one of 10
SEEDS = {"x2": {"late": 10}, "x4": {"late": 10, "ctrl": 10}}
# README.md, "Time model": a card holds at most 10 recipe runs (round 8: 131-135 GB of an H200's 143); a late run
# counts as 1.5 of them after its switch (qa3_sparse's rule for sp25), so 5 late runs make 7.5 a card.
WEIGHT = {"late": 1.5, "ctrl": 1.0}
PER_CARD = {"late": 5}
LAG = 40  # s from start's launch to the logs' first line, at most (qa3_sparse's README; this README reads 16)


def runs(layout: str = "x2") -> dict[str, tuple[list[str], list[str], int]]:
    return folder_runs(LAYOUTS[layout][0], "runs/qa3_late")


@pytest.mark.parametrize("lease", [*LAYOUTS["x2"], *LAYOUTS["x4"]], ids=lambda p: p.name)
def test_settings_name_files_that_exist(lease):
    assert_settings_evaluate_one_wave(lease, "runs/qa3_late")


def test_the_wave_fits_the_machine():
    assert_cards_hold(runs(), PER_CARD, WEIGHT)


def test_the_4_gpu_wave_fits_the_machine():
    """5 runs a card on cards 0-3, 2 or 3 of them late: at most 6.5 recipe runs' worth, qa3_sparse's measured card
    (3 sp25 and 2 ctrl), lighter than the 2-GPU layout's 7.5; 20 runs on 64 cores, the 2-GPU layout's 10 on 32."""
    load = Counter((gpu, setting(name)) for name, (_, _, gpu) in runs("x4").items())
    assert {g for g, _ in load} == {0, 1, 2, 3}
    for card in range(4):
        assert load[card, "late"] + load[card, "ctrl"] == 5 and load[card, "late"] in (2, 3), load
        assert WEIGHT["late"] * load[card, "late"] + load[card, "ctrl"] <= 6.5, card


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_training_line_composes_and_passes_the_checks(layout):
    assert_training_lines_pass(LAYOUTS[layout][0], [RECIPE])


@pytest.mark.parametrize("out", ("late", "x4"))
def test_seed_plans_are_what_their_commands_write(out, tmp_path):
    assert_seed_plans_rewrite(HERE, out, tmp_path)


AWK_PLANS = ("draw_eval.txt", "s100_eval.txt", "l128_eval.txt", "m1_eval.txt")


@pytest.mark.parametrize(
    "name", [*AWK_PLANS, *(f"x4_{n}" for n in AWK_PLANS), "x4_m1s7_eval.txt", "x4_l128s7_eval.txt"]
)
def test_awk_plans_are_what_their_commands_write(name):
    assert_plan_is_its_command_output(HERE / name)
    unit = "sentences" if name.endswith("s100_eval.txt") else "tokens"
    assert f"#@length_unit {unit}" in (HERE / name).read_text().splitlines()


def sp25_overrides(k: int) -> list[str]:
    """qa3_sparse's sp25 run at seed k: its plan's line for seeds 1-6, the same line at seed k for the others (what
    sp25_train.txt's command would write with more seeds)."""
    sp_common, sp_runs = read_plan(SPARSE / "sp25_train.txt")
    same = {i: [o for o in own if o != f"seed={i}"] for i, own in enumerate(sp_runs.values(), 1)}
    assert list(sp_runs) == [f"w1_sp25_s{i}" for i in range(1, 7)] and len({str(v) for v in same.values()}) == 1
    return sp_common + (sp_runs[f"w1_sp25_s{k}"] if k <= 6 else [f"seed={k}", *same[1]])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_run_is_the_recipe_with_only_the_switch_set(layout):
    """A late run composes the recipe at its seed with late_haystacks set and nothing else changed; its late config
    (the haystacks after step 800 and every in-training evaluation) composes qa3_sparse's sp25 at that seed: what it
    ran as w1_sp25_s<k> for k <= 6, and what it would have drawn at seeds 7-10. A ctrl run is the recipe at its seed."""
    from omegaconf import open_dict

    from rl.run.build import late_config

    got = Counter()
    for name, (common, own, _) in runs(layout).items():
        cfg = compose_cfg(common + own)
        want = compose_cfg([RECIPE, f"seed={seed(name)}"])
        got[setting(name)] += 1
        if setting(name) == "ctrl":
            assert cfg == want and cfg.late_haystacks.from_step is None, name
            continue
        with open_dict(want):
            want.late_haystacks = LATE
        assert cfg == want, name
        sp25 = compose_cfg(sp25_overrides(seed(name)))
        assert (late_config(cfg).envs, late_config(cfg).seed) == (sp25.envs, sp25.seed), name
    assert got == SEEDS[layout] and {seed(n) for n in runs(layout)} == set(range(1, 11))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_evaluations_are_the_planned_ones(layout):
    got = Counter()
    first, l128, m1, *more = (p.name for p in LAYOUTS[layout])
    m1_late, l128_late = more or (m1, l128)  # x4: seeds 7-10's 1M and 128K from files of their own
    for lease in LAYOUTS[layout]:
        for folder, run, ov, _plan, _gpu in eval_lines(lease):
            assert folder == "runs/qa3_late", (run, ov)
            got[lease.name, run, *eval_key(ov)[:3]] += 1
    names = list(runs(layout))
    want = Counter({(first, r, n, "42", "200"): 1 for r in names for n in ("1000", "32000", "S100")})
    want.update({(first, r, "32000", es, "200"): 1 for r in names for es in ("43", "44")})
    want.update({(l128, r, "128000", "42", "200"): 1 for r in names if seed(r) <= 6})
    want.update({(m1, r, "1000000", "42", "100"): 1 for r in names if seed(r) <= 6})
    if more:
        want.update({(l128_late, r, "128000", "42", "200"): 1 for r in names if seed(r) > 6})
        want.update({(m1_late, r, "1000000", "42", "100"): 1 for r in names if seed(r) > 6})
    assert got == want


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_evaluation_composes_and_writes_a_file_of_its_own(layout, tmp_path):
    """Over its run's config: the recipe's step size and T; token mode at its budget and eval seed, or sentence mode
    at 100 sentences (S100). A late run's evaluation sizes its haystacks as the line says, never by late_haystacks.
    On 4 cards a run's three 32K draws go to three cards."""
    lease_runs = write_runs(tmp_path, trained(LAYOUTS[layout][0]))
    cards = {"x2": {"0", "1"}, "x4": {"0", "1", "2", "3"}}[layout]
    files: list[str] = []
    draw_cards: dict[str, set[str]] = {}
    for lease in LAYOUTS[layout]:
        for folder, run, ov, plan, gpu in eval_lines(lease):
            assert gpu in cards and run in runs(layout), (plan, run)
            if "envs.num_tokens=32000" in ov:
                draw_cards.setdefault(run, set()).add(gpu)
            cfg = composed(lease_runs, f"{folder}/{run}", ov)
            files.append(written(cfg, lease_runs, f"{folder}/{run}"))
            assert (int(cfg.envs.step_size), int(cfg.envs.max_steps), str(cfg.envs.test_split)) == (20, 6, "test")
            assert cfg.get("late_haystacks") is None and cfg.envs.num_sentences == 100, (run, ov)
            if plan.endswith("s100_eval.txt"):
                assert (cfg.envs.length_unit, int(cfg.seed)) == ("sentences", 42)
                assert files[-1] == f"{folder}/{run}/eval_seed42_ns100.jsonl"
            else:
                n, es = int(cfg.envs.num_tokens), int(cfg.seed)
                assert cfg.envs.length_unit == "tokens" and files[-1] == f"{folder}/{run}/eval_seed{es}_nt{n}.jsonl"
    n = len(runs(layout))
    long = n * 2 if layout == "x4" else n * 6 // 10 * 2  # 128K and 1M: every x4 run, x2 seeds 1-6
    assert len(files) == len(set(files)) == n * 5 + long, [f for f, k in Counter(files).items() if k > 1]
    if layout == "x4":
        assert all(len(c) == 3 for c in draw_cards.values()) and len(draw_cards) == n, draw_cards


def test_the_readme_calls_name_this_lease():
    text = (HERE / "README.md").read_text()
    assert "kind=nvidia-h200-x2" in text and "kind=nvidia-h200-x4" in text
    verbs = [c.split("experiments/qa3_late/", 1)[1].split()[:2] for c in readme_calls(HERE / "README.md")]
    assert verbs == [
        [f"{lease}.env", verb]
        for first in ("lease", "lease_x4")
        for lease, verb in (
            (first, "setup"),
            (first, "parts"),
            (first, "start"),
            (first, "watch"),
            (first, "eval"),
            (f"{first}_l128", "eval"),
            (f"{first}_1m", "eval"),
            (first, "pack"),
        )
    ]


def test_the_time_model_puts_the_wave_inside_the_limit():
    """time_model.py over qa3_sparse's measured logs: at from_step 0 it gives sp25's measured ends (stretch 1 at the
    low end), at 2000 about ctrl's; with the switch at 800 the late runs end before TIME_LIMIT at the high end (with
    the logs' lag after launch), and at the low end earlier than sp25's runs did."""
    mod = load_script("time_model", "experiments/qa3_late")
    m = mod.main([str(HERE / "qa3_sparse_times.json")])["measures"]
    limit = int(
        next(ln.split("=")[1] for ln in (HERE / "lease.env").read_text().splitlines() if ln.startswith("TIME_"))
    )
    assert abs(mod.late_end(m, 0)[0] - min(m["sp25"]["end"])) < 15
    assert abs(mod.late_end(m, 2000)[0] - min(m["ctrl"]["end"])) < 30
    low, high = mod.late_end(m, 800)
    assert min(m["ctrl"]["end"]) < low < min(m["sp25"]["end"]) and low < high and high + LAG < limit
