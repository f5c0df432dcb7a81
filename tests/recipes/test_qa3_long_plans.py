"""experiments/qa3_long/'s lease on a 4-GPU machine (lease_x4.env, then lease_x4_extra.env, lease_x4_l128.env and
lease_x4_1m.env with the time left): the qa3 recipe (ctrl) and long (the recipe with envs.long_stories set), seeds 1-10 each, 5 runs a
card. Every plan named exists, every training line composes and passes the training checks; the plans are what their
headers' commands write; every ctrl run is the recipe at its seed and every long run the recipe with only
envs.long_stories set; every run gets 1K, 32K at eval seeds 42-44, S100, 128K and 1M, and (the extra file) 1K over
every test question at eval seed 45 and model_last.pt at 1K and 32K, each composing over its run's config as
eval_retriever.py composes it, with long_stories off, and writing a file no other evaluation writes."""

from __future__ import annotations

from collections import Counter

import pytest
from omegaconf import open_dict

from tests.conftest import ROOT, compose_cfg
from tests.recipes.lease_plans import (
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

HERE = ROOT / "experiments" / "qa3_long"
# in the order they run
LEASE = (HERE / "lease_x4.env", HERE / "lease_x4_extra.env", HERE / "lease_x4_l128.env", HERE / "lease_x4_1m.env")
FOLDER = "runs/qa3_long"
RECIPE = "experiment=offline_babilong_qa3"
LONG = {"min_facts": 87, "num_sentences": 1000}
OFF = {"min_facts": None, "num_sentences": None}


def runs() -> dict[str, tuple[list[str], list[str], int]]:
    return folder_runs(LEASE[0], FOLDER)


@pytest.mark.parametrize("lease", LEASE, ids=lambda p: p.name)
def test_settings_name_files_that_exist(lease):
    assert_settings_evaluate_one_wave(lease, FOLDER)


def test_every_training_line_composes_and_passes_the_checks():
    assert_training_lines_pass(LEASE[0], [RECIPE])


def test_the_cards_hold_5_runs_each():
    load = Counter((gpu, setting(name)) for name, (_, _, gpu) in runs().items())
    for card in range(4):
        assert load[card, "long"] + load[card, "ctrl"] == 5 and load[card, "long"] in (2, 3), load
    assert {g for g, _ in load} == {0, 1, 2, 3}


def test_seed_plans_are_what_their_commands_write(tmp_path):
    assert_seed_plans_rewrite(HERE, "x4", tmp_path)


@pytest.mark.parametrize(
    "name", ["x4_draw_eval.txt", "x4_s100_eval.txt", "x4_l128_eval.txt", "x4_m1_eval.txt", "x4_extra_eval.txt"]
)
def test_awk_plans_are_what_their_commands_write(name):
    assert_plan_is_its_command_output(HERE / name)
    unit = "sentences" if name == "x4_s100_eval.txt" else "tokens"
    assert f"#@length_unit {unit}" in (HERE / name).read_text().splitlines()


def test_every_run_is_the_recipe_with_only_long_stories_set():
    got = Counter()
    for name, (common, own, _) in runs().items():
        cfg = compose_cfg(common + own)
        want = compose_cfg([RECIPE, f"seed={seed(name)}"])
        got[setting(name)] += 1
        assert dict(want.envs.long_stories) == OFF
        if setting(name) == "long":
            with open_dict(want):
                want.envs.long_stories = LONG
        assert cfg == want, name
    assert got == {"ctrl": 10, "long": 10} and {seed(n) for n in runs()} == set(range(1, 11))


def test_evaluations_are_the_planned_ones():
    got = Counter()
    first, extra, l128, m1 = (p.name for p in LEASE)
    for lease in LEASE:
        for folder, run, ov, _plan, _gpu in eval_lines(lease):
            assert folder == FOLDER, (run, ov)
            got[lease.name, run, *eval_key(ov)] += 1
    names = list(runs())
    want = Counter({(first, r, n, "42", "200", "best"): 1 for r in names for n in ("1000", "32000", "S100")})
    want.update({(first, r, "32000", es, "200", "best"): 1 for r in names for es in ("43", "44")})
    want.update({(extra, r, "1000", "45", "1000", "best"): 1 for r in names})  # every question the 1K budget keeps
    want.update({(extra, r, n, "42", "200", "last"): 1 for r in names for n in ("1000", "32000")})
    want.update({(l128, r, "128000", "42", "200", "best"): 1 for r in names})
    want.update({(m1, r, "1000000", "42", "100", "best"): 1 for r in names})
    assert got == want


def test_every_evaluation_composes_with_long_stories_off_and_writes_a_file_of_its_own(tmp_path):
    """Over its run's config: the recipe's step size and T; token mode at its budget and eval seed, or sentence mode
    at 100 sentences (S100); envs.long_stories off for every run, long's too. A run's three 32K draws go to three
    cards; 128K and 1M put 5 chains on each card."""
    lease_runs = write_runs(tmp_path, trained(LEASE[0]))
    files: list[str] = []
    draw_cards: dict[str, set[str]] = {}
    long_cards: Counter = Counter()
    for lease in LEASE:
        for folder, run, ov, plan, gpu in eval_lines(lease):
            assert gpu in {"0", "1", "2", "3"} and run in runs(), (plan, run)
            if "envs.num_tokens=32000" in ov:
                draw_cards.setdefault(run, set()).add(gpu)
            if lease in LEASE[2:]:
                long_cards[lease.name, gpu] += 1
            cfg = composed(lease_runs, f"{folder}/{run}", ov)
            files.append(written(cfg, lease_runs, f"{folder}/{run}"))
            assert (int(cfg.envs.step_size), int(cfg.envs.max_steps), str(cfg.envs.test_split)) == (20, 6, "test")
            assert dict(cfg.envs.long_stories) == OFF, (run, ov)
            if plan == "x4_s100_eval.txt":
                assert (cfg.envs.length_unit, int(cfg.seed), cfg.envs.num_sentences) == ("sentences", 42, 100)
                assert files[-1] == f"{folder}/{run}/eval_seed42_ns100.jsonl"
            else:
                n, es, last = int(cfg.envs.num_tokens), int(cfg.seed), "_last" if cfg.use_last else ""
                want = f"{folder}/{run}/eval_seed{es}_nt{n}{last}.jsonl"
                assert cfg.envs.length_unit == "tokens" and files[-1] == want, (files[-1], want)
    assert len(files) == len(set(files)) == 20 * 10, [f for f, k in Counter(files).items() if k > 1]
    assert len(draw_cards) == 20 and all(len(c) == 3 for c in draw_cards.values()), draw_cards
    assert set(long_cards.values()) == {5} and len(long_cards) == 8, long_cards


def test_the_readme_calls_name_this_lease_in_order():
    text = (HERE / "README.md").read_text()
    assert "(planned, not yet run)" in text.splitlines()[0] and "kind=nvidia-h200-x4" in text
    verbs = [c.split("experiments/qa3_long/", 1)[1].split()[:2] for c in readme_calls(HERE / "README.md")]
    assert verbs == [
        ["lease_x4.env", "setup"],
        ["lease_x4.env", "parts"],
        ["lease_x4.env", "start"],
        ["lease_x4.env", "watch"],
        ["lease_x4.env", "eval"],
        ["lease_x4_extra.env", "eval"],
        ["lease_x4_l128.env", "eval"],
        ["lease_x4_1m.env", "eval"],
        ["lease_x4.env", "pack"],
    ]
