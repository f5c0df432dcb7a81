"""experiments/qa3_32k/round10.py's layout and pick helpers on a hand-made qa3 haystack (the archive
readers and tables run in `python experiments/qa3_32k/analyze.py`, not here: they rebuild 32K haystacks)."""

from __future__ import annotations

import io
import json
import re
import tarfile

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from envs.positions import relative_codes_by_gap
from tests.conftest import load_script

R = load_script("round10", "experiments/qa3_32k")
A = R.A

NOISE = "It was a dark and stormy night."
# 0 an earlier object fact, 2 another, 4 the gold obj (the last fact naming the apple), 5 an earlier
# move of John in prev's gap, 6 prev, 7 Y; the rest is noise.
CHUNKS = [
    "John got the apple.",
    NOISE,
    "John dropped the apple.",
    NOISE,
    "John took the apple.",
    "John went to the office.",
    "John went to the kitchen.",
    "John travelled to the garden.",
    NOISE,
    NOISE,
]
FACTS = [0, 2, 4, 5, 6, 7]


@pytest.fixture(scope="module")
def hay() -> dict:
    sample = {
        "chunks": CHUNKS,
        "facts_idx": FACTS,
        "sf_idx": [4, 6, 7],
        "num_sentences": len(CHUNKS),
        "question": "Where was the apple before the garden? ",
    }
    return A.compact(sample)


def test_roles_and_last_object_fact(hay):
    assert hay["roles"] == {"obj": 4, "prev": 6, "Y": 7}
    R.check_last_object_fact(hay)  # passes: 4 is the last fact naming the apple


@pytest.mark.parametrize("delta", [20, 100, 200])
def test_gap_fraction_is_what_the_code_floors(delta):
    rng = np.random.default_rng(0)
    ell = int(0.9 * delta)
    for _ in range(50):
        n = int(rng.integers(2, 400))
        selected = sorted(rng.choice(n, size=int(rng.integers(0, 4)), replace=False).tolist())
        codes = relative_codes_by_gap(n, selected, delta)
        for i in rng.choice(n, size=min(n, 20), replace=False):
            j, f = R.gap_fraction(n, selected, int(i))
            assert codes[i] == delta * j + int(np.floor(ell * f + 1e-9))


def test_layout(hay):
    lay = R.layout(hay)
    # obj, state ∅: one gap of 10 chunks; the closest earlier object fact is chunk 2
    assert lay["delta_obj"] == pytest.approx((4 - 2) / 9)
    assert lay["end_obj"] == pytest.approx(1 - 4 / 9)
    # prev, state {4, 7}: gap [4, 7) of 3 chunks; chunk 5 (John) at 1/2, prev at 2/2
    assert lay["delta_prev"] == pytest.approx(0.5)
    assert lay["end_prev"] == pytest.approx(0.0)


def test_layout_without_an_earlier_rival(hay):
    lonely = dict(hay, comp=dict(hay["comp"], prev=[c for c in hay["comp"]["prev"] if c != 5]))
    assert R.layout(lonely)["delta_prev"] == R.NO_RIVAL  # chunks 0 and 2 lie in another gap


def test_first_error(hay):
    perfect = {"pred_idx": [4, 7, 6, 0, 1, 2], "sf_idx": hay["sf_idx"]}
    assert R.first_error(perfect, hay, 20) is None
    # δ 20, ℓ 18, state ∅: code(i) = 2i, so chunk 2 sits 4 codes below the obj gold (chunk 4)
    early = {"pred_idx": [2, 4, 7, 6, 0, 1], "sf_idx": hay["sf_idx"]}
    assert R.first_error(early, hay, 20) == {"step": 0, "earlier": True, "kind": "2-4"}
    noise = {"pred_idx": [4, 7, 8, 6, 0, 1], "sf_idx": hay["sf_idx"]}
    assert R.first_error(noise, hay, 20) == {"step": 2, "earlier": None, "kind": "noise"}


def test_pick_wrong(hay):
    sf = hay["sf_idx"]
    assert R.pick_wrong({"pred_idx": [2, 4, 7, 6], "sf_idx": sf}, hay, "obj") is True
    assert R.pick_wrong({"pred_idx": [7, 4, 6, 2], "sf_idx": sf}, hay, "obj") is False  # Y first: no error
    assert R.pick_wrong({"pred_idx": [4, 7, 5, 6], "sf_idx": sf}, hay, "prev") is True
    assert R.pick_wrong({"pred_idx": [7, 4, 6, 5], "sf_idx": sf}, hay, "prev") is False
    assert R.pick_wrong({"pred_idx": [2, 4, 7, 6], "sf_idx": sf}, hay, "prev") is None  # never in {obj, Y}


def test_logistic_recovers_its_weights():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20000, 2))
    p = 1 / (1 + np.exp(-(-1.0 + 2.0 * x[:, 0] - 0.5 * x[:, 1])))
    w = R.logistic(x, (rng.random(len(p)) < p).astype(float))
    assert w == pytest.approx([-1.0, 2.0, -0.5], abs=0.1)


def test_bins():
    assert [R.bin_label(R.DELTA_BINS, k) for k in (0, 5)] == ["[0.0, 0.01)", "≥ 0.2"]
    assert R.bin_label(R.END_BINS, len(R.END_BINS) - 2) == "[0.2, 1]"
    assert R.in_bins(R.NO_RIVAL, R.DELTA_BINS) == len(R.DELTA_BINS) - 2


# ---------------------------------------------------------------- reading a round (qa3_sparse and the like)

SPARSE = R.Round("qa3_sparse", ("ctrl", "sp25"), ("ctrl", "sp25"), ("num_sentences",))


def meta(unit: str = "nt", size: int = 1000, seed: int = 42, delta: int = 20) -> dict:
    """A .meta.json as eval_retriever.py writes it (envs/data/babilong.py eval_meta)."""
    if unit == "nt":
        length = {"unit": "tokens", "tokenizer": "gpt2", "num_tokens": size, "reserve": 300}
        length |= {"min_noise": 10, "tokens_per_fact": 8}
        n = None
    else:
        length, n = {"unit": "sentences", "tokenizer": "gpt2"}, size
    return {"task": A.TASK, "seed": seed, "split": "test", "positions": f"relative/{delta}/linspace"} | {
        "num_sentences": n,
        "length": length,
    }


def envs(**change) -> dict:
    return {"step_size": 20, "num_sentences": 100, "subsample_size": 100, "length_unit": "sentences"} | change


TOKEN_FILES = {f"eval_seed{es}_nt{nt}.jsonl": meta(seed=es, size=nt) for es, nt in (R.K1, *R.DRAWS)}


def archive(path, runs: dict[str, dict], files: dict[str, dict] | None = None):
    """A runs.tar.xz of ``runs`` {run: envs}, each run with the files a round needs, 1K and the three 32K
    draws (or ``files`` {name: meta}), of one record each."""
    with tarfile.open(path, "w:xz") as tar:

        def add(name: str, text: str) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))

        for run, e in runs.items():
            add(f"{run}/config_resolved.yaml", yaml.safe_dump({"envs": e}))
            for name, m in (files or TOKEN_FILES).items():
                add(f"{run}/{name}", json.dumps({"id": 0, "pred_idx": [1], "sf_idx": [1]}) + "\n")
                add(f"{run}/{name}.meta.json", json.dumps(m))
    return path


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("w1_sp25_s3/eval_seed42_ns100.jsonl", ("sp25", "3", "42", "ns", "100")),
        ("w1_ctrl_s1/eval_seed43_nt32000.jsonl", ("ctrl", "1", "43", "nt", "32000")),
        ("w1_ctrl_s1/eval_seed42_ns100_last.jsonl", None),  # the last checkpoint: not read
        ("w1_ctrl_s1/eval_seed42_ns100.jsonl.meta.json", None),
        ("w1_ctrl_s1/eval_seed42_nx100.jsonl", None),
    ],
)
def test_member_pattern(name, want):
    m = R.MEMBER.match(name)
    assert (m and (m["setting"], m["seed"], m["es"], m["unit"], m["size"])) == want


def test_check_meta_accepts_both_modes():
    R.check_meta("a", meta(), "nt", 42, 1000, 20)
    R.check_meta("b", meta("ns", 100), "ns", 42, 100, 20)


@pytest.mark.parametrize(
    ("broken", "key"),
    [
        (lambda m: m["length"].update(unit="tokens"), "length.unit"),  # a token-mode file named _ns
        (lambda m: m.update(num_sentences=1200), "num_sentences"),
        (lambda m: m.update(split="train"), "split"),
        (lambda m: m.update(seed=43), "seed"),
        (lambda m: m.update(positions="relative/100/linspace"), "positions"),
        (lambda m: m["length"].update(num_tokens=1000), "length.num_tokens"),
        (lambda m: m.pop("length"), "length.unit"),  # malformed: no length at all
    ],
)
def test_check_meta_refuses_a_wrong_sentence_mode_meta(broken, key):
    m = meta("ns", 100)
    broken(m)
    with pytest.raises(SystemExit, match=rf"x/eval_seed42_ns100.jsonl: .*{re.escape(key)} .*\(expected"):
        R.check_meta("x/eval_seed42_ns100.jsonl", m, "ns", 42, 100, 20)


def test_check_meta_refuses_a_meta_that_is_not_an_object():
    with pytest.raises(SystemExit, match="length.unit '<missing>'"):
        R.check_meta("x", [], "ns", 42, 100, 20)


def test_read_round_with_a_varied_key_and_sentence_mode(tmp_path):
    files = TOKEN_FILES | {"eval_seed42_ns100.jsonl": meta("ns", 100)}
    runs = {"w1_ctrl_s1": envs(), "w1_sp25_s1": envs(num_sentences=[100, 100, 100, 1000]), "w1_sp25_s2": envs()}
    runs["w1_sp25_s2"]["num_sentences"] = [100, 100, 100, 1000]
    rec = R.read_round(SPARSE, archive(tmp_path / "a.tar.xz", runs, files))
    assert rec.files == 15
    assert rec.varied == {"ctrl": {"num_sentences": 100}, "sp25": {"num_sentences": [100, 100, 100, 1000]}}
    assert sorted(rec.runs["sp25"][(42, 1000)]) == [1, 2]
    assert sorted(rec.sentences["sp25"][R.S100]) == [1, 2] and R.S100 not in rec.runs["sp25"]


def test_read_round_refuses_an_undeclared_difference(tmp_path):
    runs = {"w1_ctrl_s1": envs(), "w1_sp25_s1": envs(num_sentences=[100, 1000])}
    a = archive(tmp_path / "a.tar.xz", runs)
    with pytest.raises(SystemExit, match=r"differ .* in \['num_sentences'\]; the round declares only \['step_size'\]"):
        R.read_round(R.Round("x", ("ctrl", "sp25"), ("ctrl", "sp25")), a)  # round 10's varied keys
    b = archive(tmp_path / "b.tar.xz", runs | {"w1_sp25_s2": envs(num_sentences=[100, 1000], subsample_size=50)})
    with pytest.raises(SystemExit, match=r"in \['subsample_size'\]"):
        R.read_round(SPARSE, b)  # num_sentences is declared, subsample_size is not


def test_read_round_refuses_a_setting_differing_within(tmp_path):
    runs = {"w1_ctrl_s1": envs(), "w1_ctrl_s2": envs(num_sentences=300)}
    with pytest.raises(SystemExit, match="other runs of its setting"):
        R.read_round(SPARSE, archive(tmp_path / "a.tar.xz", runs))


def test_read_round_reads_only_its_settings(tmp_path):
    runs = {"w1_ctrl_s1": envs(), "w1_d100_s1": envs(step_size=100, subsample_size=7)}
    a = archive(tmp_path / "a.tar.xz", runs)
    rec = R.read_round(R.Round("x", ("ctrl",), ("ctrl", "ctrl")), a)  # d100 is neither read nor compared
    assert list(rec.runs) == ["ctrl"] and rec.files == 4
    with pytest.raises(SystemExit, match=r"no token-mode files of the setting\(s\) \['sp25'\]"):
        R.read_round(SPARSE, a)


def test_read_round_refuses_a_wrong_meta_in_the_archive(tmp_path):
    files = TOKEN_FILES | {"eval_seed42_ns100.jsonl": meta("nt", 100)}
    with pytest.raises(SystemExit, match=r"eval_seed42_ns100.jsonl: .*length.unit 'tokens' \(expected 'sentences'\)"):
        R.read_round(SPARSE, archive(tmp_path / "a.tar.xz", {"w1_ctrl_s1": envs()}, files))


def test_read_round_refuses_a_run_without_a_draw(tmp_path):
    files = {k: v for k, v in TOKEN_FILES.items() if "seed43" not in k}
    a = archive(tmp_path / "a.tar.xz", {"w1_ctrl_s1": envs()}, files)
    with pytest.raises(SystemExit, match=r"setting ctrl lacks files, .*\[\(1, \(43, 32000\)\)\]"):
        R.read_round(R.Round("x", ("ctrl",), ("ctrl", "ctrl")), a)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"compare": ("ctrl", "d100")}, "compare"),
        ({"compare": ("ctrl",)}, "compare"),
        ({"varied": ("subsample_size",)}, "leave the test haystacks alone"),
        ({"settings": ("ctrl", "ctrl")}, "distinct"),
    ],
)
def test_round_refuses_bad_arguments(kw, match):
    args = {"name": "qa3_sparse", "settings": ("ctrl", "sp25"), "compare": ("ctrl", "sp25")} | kw
    with pytest.raises(SystemExit, match=match):
        R.Round(**args)


def test_round_defaults_are_round_10():
    r = R.Round()
    assert (r.name, r.settings, r.compare, r.varied) == (
        "round10",
        ("ctrl", "d100", "d200"),
        ("ctrl", "d100"),
        ("step_size",),
    )
    assert r.title == "Round 10" and SPARSE.title == "qa3_sparse"
    assert r.archive == A.ROOT / "experiments" / "round10" / "runs.tar.xz"


def test_main_passes_the_arguments(monkeypatch, capsys):
    seen = {}

    def tables(rnd, long):
        seen.update(rnd=rnd, long=long)
        return [], {"records_checked": 0, "files": 0, "step_sizes": {}}

    monkeypatch.setattr(R, "tables", tables)
    argv = ["--round", "qa3_sparse", "--settings", "ctrl,sp25", "--compare", "ctrl,sp25", "--varied", "num_sentences"]
    R.main(argv)
    assert seen == {"rnd": SPARSE, "long": True}
    out = capsys.readouterr().out
    assert out.startswith(
        "# qa3_sparse, read per question\n\nGenerated by `python experiments/qa3_32k/round10.py --round"
    )
    assert "\n## qa3_sparse\n" in out


def test_training_sets_one_per_num_sentences(monkeypatch):
    built = []
    monkeypatch.setattr(A, "training_haystacks", lambda cfg: built.append(cfg.envs.num_sentences) or [])
    cfgs = {
        s: OmegaConf.create({"envs": envs(num_sentences=n)})
        for s, n in (("ctrl", 100), ("sp25", [100, 1000]), ("d", 100))
    }
    trains = R.training_sets(R.Records({}, {}, {}, {}, cfgs, 0))
    assert [(t.sizes, t.settings) for t in trains] == [(100, ("ctrl", "d")), ([100, 1000], ("sp25",))]
    assert built == [100, [100, 1000]]  # sp25's set is built with its own list
    assert [R.tag(t, trains) for t in trains] == [" (ctrl, d)", " (sp25)"] and R.tag(trains[0], trains[:1]) == ""


# ---------------------------------------------------------------- Table 10k on hand-made records


def test_long_stories():
    # question 0 is in the 1K and 32K sets (shared), 1 only in the 32K set (a long story)
    small = {"facts": {i: "" for i in range(10)}}
    big = {"facts": {i: "" for i in range(90)}}
    hays = {R.K1: {0: small}} | {k: {0: small, 1: big} for k in R.DRAWS}
    good = {"sf_idx": [1, 2, 3], "pred_idx": [1, 2, 3]}  # F1 100
    one_off = {"sf_idx": [1, 2, 3], "pred_idx": [9, 1, 2, 3]}  # F1 2 · 0.75 / 1.75
    f_off = 100 * 2 * 0.75 / 1.75

    def rows(f_shared, f_long):
        return [dict(f_shared, id=0), dict(f_long, id=1)]

    runs = {(42, 1000): {1: [dict(good, id=0)]}} | {k: {1: rows(good, one_off)} for k in R.DRAWS}
    runs[(44, 32000)] = {1: rows(one_off, good)}
    sentences = {"ctrl": {R.S100: {1: rows(good, good)}}}
    rec = R.Records({"ctrl": runs, "sp25": runs}, sentences, {}, {}, {}, 0)
    md, data = R.long_stories(SPARSE, rec, hays)
    d = data["ctrl/other"]
    assert d["32K/42"] == pytest.approx(f_off) and d["32K/44"] == 100
    assert d["32K"] == pytest.approx((2 * f_off + 100) / 3) and d["S100"] == 100 and d["1K"] is None
    assert data["ctrl/shared"]["1K"] == 100 and data["ctrl/all"]["S100-32K"] == pytest.approx(
        100 - data["ctrl/all"]["32K"]
    )
    assert data["sp25/other"]["S100"] is None  # sp25 has no S100 file here
    assert "the other 1 (90-90 story facts)" in md
    bad = R.Records({"ctrl": runs}, {"ctrl": {R.S100: {1: [dict(good, id=0)]}}}, {}, {}, {}, 0)
    with pytest.raises(SystemExit, match="S100 file lacks"):
        R.long_stories(R.Round("x", ("ctrl",), ("ctrl", "ctrl")), bad, hays)


# ---------------------------------------------------------------- the sentence-mode rebuild (analyze.py)


@pytest.fixture(scope="module")
def run_cfg():
    """Round 10's ctrl config: the recipe's envs (the first member of the committed archive)."""
    with tarfile.open(A.ROOT / "experiments" / "round10" / "runs.tar.xz", "r|xz") as tar:
        for m in tar:
            if m.name == "w1_ctrl_s1/config_resolved.yaml":
                return OmegaConf.create(tar.extractfile(m).read().decode())
    raise AssertionError("no config in round 10's archive")


def test_rebuild_and_check_in_sentence_mode(run_cfg):
    """An S100 record matches the test haystack built in sentence mode at 100 sentences (eval seed 42),
    whatever the run trained on; a record of another size or mode is refused."""
    from envs.data.registry import build_dataset
    from envs.legacy import Legacy

    cfg = OmegaConf.merge(run_cfg, {"envs": {"num_sentences": [100, 100, 100, 1000]}})  # sp25's list
    envs = A.envs_config(cfg, 100, "sentences")
    assert (envs.length_unit, envs.num_sentences) == ("sentences", 100)
    legacy = Legacy.from_cfg(cfg.legacy)

    def record(size: int, qid: int = 3) -> dict:
        e = A.envs_config(cfg, size, "sentences")
        s = build_dataset(e, "test", seed=42, legacy=legacy)[qid]
        pred = [*s["sf_idx"], 0]
        return {"id": qid, "sf_idx": s["sf_idx"], "num_sentences": s["num_sentences"], "question": s["question"]} | {
            "pred_idx": pred,
            "pred_texts": [s["chunks"][i] for i in pred],
        }

    hays = A.rebuild_and_check(cfg, {100: {3: [record(100)]}}, seed=42, unit="sentences")
    assert hays[100][3]["n"] == 100 and sorted(hays[100][3]["roles"]) == ["Y", "obj", "prev"]
    with pytest.raises(SystemExit, match="seed 42 ns100 id 3: the record does not match"):
        A.rebuild_and_check(cfg, {100: {3: [record(120)]}}, seed=42, unit="sentences")
    with pytest.raises(SystemExit, match="seed 42 nt1000 id 3"):
        A.rebuild_and_check(cfg, {1000: {3: [record(100)]}}, seed=42)  # token mode: another haystack


def test_tables_10f_10g_take_the_compared_settings(hay):
    hays = {R.K1: {0: hay}} | {k: {0: hay} for k in R.DRAWS}
    rec = {"id": 0, "pred_idx": [4, 7, 6], "sf_idx": hay["sf_idx"]}
    runs = {s: {k: {1: [rec]} for k in (R.K1, *R.DRAWS)} for s in ("ctrl", "sp25")}
    md, data = R.question_features(SPARSE, runs, hays)
    assert {k.split("/")[0] for k in data} == {"ctrl", "sp25"} and "| sp25 | story facts 1-20 | 3 |" in md
    md, data = R.layout_errors(SPARSE, runs, hays)
    assert "sp25 32K: % wrong (episodes)" in md and "d100" not in md
    assert data["obj/delta_obj/≥ 0.2/sp25/32K"] == {"episodes": 3, "wrong": 0.0}
