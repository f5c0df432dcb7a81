"""``envs.long_stories`` (envs/data/babilong.py; experiments/qa3_long): stories of at least
``min_facts`` facts get larger training haystacks, every other sample stays what it was.

On the embedded qa3 training file (1 925 real stories, 263 of them with >= 87 facts), seed 1, the
recipe's split (5 % validation)."""

from __future__ import annotations

import hashlib
import json

import pytest
from omegaconf import OmegaConf

from envs.data.babi import load_babi_file
from envs.data.babilong import BabiLongDataset, LongStories
from envs.data.registry import build_dataset
from rl.run.config import upgrade_run_config
from rl.run.eval_config import EvalError, merge_eval_config
from rl.run.validate import ConfigError, check_training
from tests.conftest import ROOT, compose_cfg
from tests.eval.conftest import eval_cfg, write_run_config

from .conftest import BABI_DIR, EMBEDDED, FIXTURES, REPO

SP25 = [100, 100, 100, 1000]  # qa3_sparse's sp25 mix
QA3 = "qa3_three-supporting-facts"
# sha256 of json.dumps([ds[i] for i in INDICES[split]], sort_keys=True), built by the tree before
# envs.long_stories existed (commit 7760fa3): "off" must give these bit for bit
INDICES = {"train": list(range(8)), "validation": list(range(10))}
TODAY = {
    ("100", "train"): "5bdd63a8833d048b07c2b15f3a3ce09433d862ef2226e42919922c4471822f54",
    ("100", "validation"): "dc3d90b87104d6dedc91a1040e57c0642747a7405b1c916bac71fe8ddde89eaf",
    (str(SP25), "train"): "dcbff8a5a944b8add8a7e6792ddcf327c01c65a18d66cee1d6e96e822d550e8b",
    (str(SP25), "validation"): "08fcb05487acadc3e02aba98ce60677cfd33271e48fe09ef2fa10a35d7e32715",
}


def envs(num_sentences=100, min_facts=None, long=None):
    node = OmegaConf.load(REPO / "configs/envs/babilong.yaml")
    cfg = OmegaConf.create({"paths": {"data_root": str(EMBEDDED), "babi_dir": BABI_DIR}, "envs": node})
    cfg.envs.task = QA3
    cfg.envs.num_sentences = num_sentences
    cfg.envs.long_stories = {"min_facts": min_facts, "num_sentences": long}
    return cfg.envs


def dataset(split="train", **kw):
    ds = build_dataset(envs(**kw), split, seed=1, validation_fraction=0.05)
    ds.base.record_num_tokens = False  # as training builds them (rl/run/build.py); faster
    return ds


def facts_of(ds, i: int) -> int:
    """Facts in the story of sample ``i`` of a registry subset."""
    base = ds.base
    return len(base.babi[ds.indices[i]].facts)


def noise_of(sample) -> list[str]:
    fset = set(sample["facts_idx"])
    return [c for j, c in enumerate(sample["chunks"]) if j not in fset]


@pytest.fixture(scope="module")
def stories():
    """The training split's first 400 samples, by story length: (short, long with 87-99 facts)."""
    ds = dataset()
    counts = [facts_of(ds, i) for i in range(400)]
    short = [i for i, m in enumerate(counts) if m < 87]
    long = [i for i, m in enumerate(counts) if 87 <= m < 100]  # with some noise in today's 100 sentences
    assert len(short) > 300 and len(long) > 10, (len(short), len(long))
    return short, long


@pytest.mark.parametrize("sizes", [100, SP25], ids=["100", "sp25"])
@pytest.mark.parametrize("split", ["train", "validation"])
def test_off_is_today_bit_for_bit(sizes, split):
    ds = build_dataset(envs(sizes), split, seed=1, validation_fraction=0.05)  # num_tokens counted, as before
    got = hashlib.sha256(json.dumps([ds[i] for i in INDICES[split]], sort_keys=True).encode()).hexdigest()
    assert got == TODAY[(str(sizes), split)]


@pytest.mark.parametrize("sizes", [100, SP25], ids=["100", "sp25"])
@pytest.mark.parametrize("long", [1000, [500, 1000]], ids=["int", "list"])
def test_short_stories_keep_their_samples(stories, sizes, long):
    short, _ = stories
    off, on = dataset(num_sentences=sizes), dataset(num_sentences=sizes, min_facts=87, long=long)
    for i in short[:150]:
        assert on[i] == off[i], i


def test_long_stories_get_the_long_size(stories):
    _, long = stories
    on = dataset(min_facts=87, long=1000)
    assert {len(on[i]["chunks"]) for i in long} == {1000}
    drawn = dataset(min_facts=87, long=[500, 1000])
    sizes = [len(drawn[i]["chunks"]) for i in long]
    assert set(sizes) == {500, 1000}  # both drawn, and the same again on a second build
    assert sizes == [len(dataset(min_facts=87, long=[500, 1000])[i]["chunks"]) for i in long]
    for i in long[:5]:
        s, m = on[i], facts_of(on, i)
        assert [s["chunks"][j] for j in s["facts_idx"]] == on.base.babi[on.indices[i]].facts and m >= 87


def test_validation_draws_long_haystacks_too():
    val = dataset("validation", min_facts=87, long=1000)
    long = [i for i in range(len(val)) if facts_of(val, i) >= 87]
    assert long and all(len(val[i]["chunks"]) == 1000 for i in long)


def test_the_threshold_is_inclusive(stories):
    _, long = stories
    i = long[0]
    m = facts_of(dataset(), i)
    assert len(dataset(min_facts=m, long=1000)[i]["chunks"]) == 1000  # exactly min_facts facts: long
    assert dataset(min_facts=m + 1, long=1000)[i] == dataset()[i]  # one short of it: today's sample


@pytest.mark.parametrize("sizes", [100, SP25], ids=["100", "sp25"])
@pytest.mark.parametrize("long", [1000, [500, 1000]], ids=["int", "list"])
def test_a_long_story_differs_only_through_its_size(stories, sizes, long):
    """The sample's generator is consumed as before up to the noise draw: the noise runs are drawn
    one after another from the same state, so the shorter haystack's noise sentences are the first
    of the longer's (sp25 gives some long stories 1 000 sentences already)."""
    _, longs = stories
    off, on = dataset(num_sentences=sizes), dataset(num_sentences=sizes, min_facts=87, long=long)
    grew = 0
    for i in longs:
        short, longer = sorted((noise_of(off[i]), noise_of(on[i])), key=len)
        assert short and longer[: len(short)] == short, i
        grew += len(on[i]["chunks"]) > len(off[i]["chunks"])
    assert grew > len(longs) // 2


def test_the_dataset_class_refuses_what_it_cannot_do():
    babi = load_babi_file(FIXTURES / "qa2_two-supporting-facts_test.txt")
    noise = [[f"noise {b}-{s}." for s in range(300)] for b in range(10)]
    long = LongStories(2, (50,))
    with pytest.raises(ValueError, match="legacy.fixed_noise_seed"):
        BabiLongDataset(babi, noise, 20, 0, "test", fixed_noise_seed=True, long_stories=long)
    with pytest.raises(ValueError, match="min_facts >= 1 and sizes >= 1"):
        LongStories(0, (50,))
    with pytest.raises(ValueError, match="min_facts >= 1 and sizes >= 1"):
        LongStories(3, (50, 0))
    ds = BabiLongDataset(babi, noise, 20, 0, "test", long_stories=long)
    assert [len(ds[i]["chunks"]) for i in range(len(ds))] == [50 if len(b.facts) >= 2 else 20 for b in babi]


def test_the_token_mode_refuses_it():
    cfg = envs(min_facts=87, long=1000)
    cfg.length_unit = "tokens"
    with pytest.raises(ValueError, match="needs the sentence mode"):
        build_dataset(cfg, "test", seed=0)


RECIPE = ["experiment=offline_babilong_qa3", "seed=1"]
LONG = ["envs.long_stories.min_facts=87", "envs.long_stories.num_sentences=1000"]


@pytest.mark.parametrize(
    "extra, line",
    [
        (["envs.long_stories.min_facts=0", "envs.long_stories.num_sentences=1000"], "min_facts=0: expected an integer"),
        (["envs.long_stories.min_facts=true", "envs.long_stories.num_sentences=1000"], "min_facts=True: expected"),
        (["envs.long_stories.min_facts=87"], "envs.long_stories: set min_facts and num_sentences together"),
        (["envs.long_stories.num_sentences=1000"], "envs.long_stories: set min_facts and num_sentences together"),
        (
            ["envs.long_stories.min_facts=87", "envs.long_stories.num_sentences=[1000,0]"],
            "envs.long_stories.num_sentences=[1000, 0]: expected an integer >= 1 or a list of them",
        ),
        (["envs.long_stories.min_facts=87", "envs.long_stories.num_sentences=[]"], "num_sentences=[]: expected"),
        ([*LONG, "envs.length_unit=tokens"], "envs.long_stories: needs haystacks sized in sentences"),
        ([*LONG, "+envs.long_stories.min_fact=3"], "envs.long_stories.min_fact: unknown key"),
    ],
)
def test_bad_settings_are_refused_in_one_line(extra, line):
    with pytest.raises(ConfigError) as err:
        check_training(compose_cfg([*RECIPE, *extra]))
    assert any(line in e for e in err.value.lines), err.value.lines
    assert all("\n" not in e for e in err.value.lines)


def test_the_recipe_composes_with_it_and_every_preset_without_it(stories):
    cfg = compose_cfg([*RECIPE, *LONG])
    check_training(cfg)
    assert dict(cfg.envs.long_stories) == {"min_facts": 87, "num_sentences": 1000}
    with_list = compose_cfg([*RECIPE, "envs.long_stories.min_facts=87", "envs.long_stories.num_sentences=[500,1000]"])
    check_training(with_list)
    for preset in sorted((ROOT / "configs" / "experiment").glob("*.yaml")):
        envs_node = compose_cfg([f"experiment={preset.stem}"]).envs
        if envs_node.name == "babilong":
            assert dict(envs_node.long_stories) == {"min_facts": None, "num_sentences": None}, preset.stem


def test_an_old_run_config_reads_it_off():
    saved = OmegaConf.to_container(compose_cfg(RECIPE), resolve=False)
    del saved["envs"]["long_stories"]
    assert upgrade_run_config(saved)["envs"]["long_stories"] == {"min_facts": None, "num_sentences": None}


def test_evaluation_sets_it_off(tmp_path):
    """A run trained with long stories is evaluated on the test haystacks of the evaluation's own
    sizing, in both units (as late_haystacks, which evaluation never takes)."""
    write_run_config(tmp_path, ["experiment=demo", "envs.num_sentences=10", *LONG])
    for extra in ([], ["envs.num_sentences=100"]):
        cfg = merge_eval_config(eval_cfg(tmp_path, *extra))
        assert dict(cfg.envs.long_stories) == {"min_facts": None, "num_sentences": None}
    with pytest.raises(EvalError, match="envs.long_stories: sizes training haystacks only"):
        merge_eval_config(eval_cfg(tmp_path, "envs.num_sentences=100", "+envs.long_stories.min_facts=87"))


def test_the_32k_analysis_rebuilds_test_haystacks_without_it():
    """experiments/qa3_32k: analyze.envs_config sizes a test haystack as evaluation does (long_stories off), keeps the
    run's training haystacks as they were, and a round may vary long_stories (round10.py --varied)."""
    from tests.conftest import load_script

    analyze = load_script("analyze", "experiments/qa3_32k")
    round10 = load_script("round10", "experiments/qa3_32k")
    cfg = compose_cfg([*RECIPE, *LONG])
    assert dict(analyze.envs_config(cfg, 32000).long_stories) == {"min_facts": None, "num_sentences": None}
    assert dict(analyze.envs_config(cfg, None).long_stories) == {"min_facts": 87, "num_sentences": 1000}
    round10.Round("qa3_long", ("ctrl", "long"), ("ctrl", "long"), ("long_stories",))
    old = analyze.envs_config(cfg, None)
    del old["long_stories"]  # a run config saved before the key: off
    assert build_dataset(old, "train", seed=1).long_stories is None
