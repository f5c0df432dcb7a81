"""Round 10 of the qa3 32K analysis (issue 43): the step-size runs read the way analyze.py reads rounds 7-9,
and any later round of the recipe read the same way.

Called by analyze.py's main for round 10 (its tables "10a"-"10j" and results.json's keys of the same
names). Reads experiments/round10/runs.tar.xz: settings ctrl (δ = 20), d100 and d200, every qa3 file
``eval_seed<S>_nt<N>.jsonl`` of the best checkpoint (1K, 32K, 128K and 1M at eval seed 42; 32K also at
eval seeds 43 and 44, the second and third haystack draws). Each run's δ comes from its
config_resolved.yaml and must equal the ``positions`` its evaluation files name. The haystacks are rebuilt
per eval seed and length, and every record is checked against them (analyze.rebuild_and_check).

Another round, from the command line (README.md, "Round 10: finer codes"; Table 10k added)::

    python experiments/qa3_32k/round10.py --round qa3_sparse --settings ctrl,sp25 --compare ctrl,sp25 \
        --varied num_sentences --json experiments/qa3_sparse/analysis.json

Its runs may differ only in the envs keys it names as varied. Sentence-mode files
``eval_seed<S>_ns<N>.jsonl`` (S100: ``_ns100`` at eval seed 42) are read and checked too, their haystacks
rebuilt in sentence mode. The training haystacks (run seed 1) are built per distinct
``envs.num_sentences`` of the settings.

Layout features (README.md, "Round 10"): in a role's canonical state each chunk sits in a gap at a
*fraction* r / (n − 1) of it, the position the code floors (δ-free). ``obj``'s gold is always the last
story fact naming the object (checked here on every haystack), so its nearest rival is the closest
earlier such fact: Δ_obj is their difference in fractions at the first pick. Δ_prev is the same for
``prev`` and the closest earlier fact of its person in its gap (state {obj, Y}). "From the end" is
1 − the gold's fraction: how far from the end of its gap it sits.
"""

# No ``from __future__ import annotations``: tests load this file with importlib, outside sys.modules, and
# dataclasses then cannot resolve string annotations.
import argparse
import json
import re
import sys
import tarfile
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parent))
import analyze as A  # noqa: E402

EVAL_SEEDS = (42, 43, 44)
DRAWS = tuple((s, 32000) for s in EVAL_SEEDS)  # the three 32K haystack draws
K1 = (42, 1000)
S100 = (42, 100)  # sentence mode, 100 sentences, eval seed 42: the test questions in training-like haystacks
MEMBER = re.compile(
    r"^(?P<run>w\d+_(?P<setting>[A-Za-z0-9]+)_s(?P<seed>\d+))/"
    r"eval_seed(?P<es>\d+)_(?P<unit>nt|ns)(?P<size>\d+)\.jsonl$"  # nt: token mode, ns: sentence mode
)
# envs keys a round may vary between its settings. None changes a test haystack: step_size only
# positions its chunks, each file's haystacks are rebuilt at the file's own size (num_tokens or
# num_sentences), never the run's, and long_stories (training only) is off in every evaluation and
# rebuild (analyze.envs_config). Any other difference could change what a run saw, so it is refused.
SAFE_VARIED = ("step_size", "num_sentences", "long_stories")
KINDS = ("tie", "1", "2-4", "≥ 5", "other story", "noise")
FACT_BINS = ((1, 20), (21, 43), (44, 86), (87, 99), (100, 149), (150, 228))
COMP_BINS = ((0, 9), (10, 19), (20, 39), (40, 999))
DELTA_BINS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 9.0)  # Δ in gap fractions (9: no earlier rival)
END_BINS = (0.0, 0.02, 0.05, 0.1, 0.2, 1.01)
BOOT = 200  # cluster-bootstrap resamples (over questions) of the logistic fits
NO_RIVAL = 1.0  # Δ of a gold fact with no earlier rival: as far as a gap allows


@dataclass(frozen=True)
class Round:
    """Which archive to read (experiments/<name>/runs.tar.xz), which of its settings, the two that
    Tables 10f-10h set side by side, and the envs keys its settings differ in."""

    name: str = "round10"
    settings: tuple[str, ...] = ("ctrl", "d100", "d200")
    compare: tuple[str, str] = ("ctrl", "d100")
    varied: tuple[str, ...] = ("step_size",)

    def __post_init__(self) -> None:
        if not self.settings or len(set(self.settings)) != len(self.settings):
            raise SystemExit(f"settings {self.settings}: expected distinct names")
        if len(self.compare) != 2 or not set(self.compare) <= set(self.settings):
            raise SystemExit(f"compare {self.compare}: expected two of the settings {self.settings}")
        if not set(self.varied) <= set(SAFE_VARIED):
            raise SystemExit(f"varied {self.varied}: only {SAFE_VARIED} leave the test haystacks alone")

    @property
    def archive(self) -> Path:
        return A.ROOT / "experiments" / self.name / "runs.tar.xz"

    @property
    def title(self) -> str:
        m = re.fullmatch(r"round(\d+)", self.name)
        return f"Round {m[1]}" if m else self.name


@dataclass
class Records:
    """A round's records: ``runs`` {setting: {(eval seed, nt): {run seed: records}}} of the token-mode
    files, ``sentences`` the same keyed (eval seed, num_sentences) of the sentence-mode ones; each
    setting's δ, values of the varied keys and one run config; the number of files."""

    runs: dict[str, dict]
    sentences: dict[str, dict]
    deltas: dict[str, int]
    varied: dict[str, dict[str, Any]]
    cfgs: dict[str, Any]
    files: int


@dataclass(frozen=True)
class Training:
    """The training haystacks (run seed 1) of the settings sharing one ``envs.num_sentences`` (and
    ``envs.long_stories``: then ``sizes`` says so). A list is drawn from per question, by the
    question's own generator, whose key the list is part of."""

    sizes: Any
    settings: tuple[str, ...]
    haystacks: list[dict]


# ---------------------------------------------------------------- records


def read_round(rnd: Round, archive: Path | None = None) -> Records:
    """Every evaluation file of the round's settings in ``archive`` (default: the round's), each checked
    against its run: a run's envs may differ from the round's first run only in the round's varied
    keys, and within a setting not at all (run seed aside)."""
    runs: dict[str, dict] = {s: defaultdict(dict) for s in rnd.settings}
    sentences: dict[str, dict] = {s: defaultdict(dict) for s in rnd.settings}
    deltas: dict[str, int] = {}
    varied: dict[str, dict[str, Any]] = {}
    cfgs: dict[str, Any] = {}
    envs0, files = None, 0
    archive = archive or rnd.archive
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}
        for name in sorted(members):
            m = MEMBER.match(name)
            if not m or m["setting"] not in rnd.settings:
                continue
            meta = json.loads(tar.extractfile(members[name + ".meta.json"]).read())
            run_cfg = OmegaConf.create(tar.extractfile(members[f"{m['run']}/config_resolved.yaml"]).read().decode())
            delta = int(run_cfg.envs.step_size)
            envs = OmegaConf.to_container(run_cfg.envs, resolve=True)
            own = {k: envs.pop(k, None) for k in rnd.varied}
            if envs0 is None:
                envs0 = envs
            if envs != envs0:
                keys = sorted(k for k in envs.keys() | envs0.keys() if envs.get(k) != envs0.get(k))
                raise SystemExit(
                    f"{name}: its run's envs differ from the round's other runs in {keys}; "
                    f"the round declares only {list(rnd.varied)} as varied"
                )
            s = m["setting"]
            if varied.setdefault(s, own) != own or deltas.setdefault(s, delta) != delta:
                raise SystemExit(f"{name}: settings differ from the other runs of its setting: {own}, δ {delta}")
            cfgs.setdefault(s, run_cfg)
            key = (int(m["es"]), int(m["size"]))
            check_meta(name, meta, m["unit"], *key, delta)
            rows = tar.extractfile(members[name]).read().decode().splitlines()
            (runs if m["unit"] == "nt" else sentences)[s][key][int(m["seed"])] = [
                json.loads(r) for r in rows if r.strip()
            ]
            files += 1
    missing = [s for s in rnd.settings if not runs[s]]
    if missing:
        raise SystemExit(f"{archive}: no token-mode files of the setting(s) {missing}")
    for s, per in runs.items():  # every table reads each run at 1K and at the three 32K draws
        seeds = {x for by_seed in per.values() for x in by_seed}
        lacking = sorted((x, k) for x in seeds for k in (K1, *DRAWS) if x not in per.get(k, {}))
        if lacking:
            raise SystemExit(f"{archive}: setting {s} lacks files, as (run seed, (eval seed, nt)): {lacking}")
    return Records(
        {s: dict(v) for s, v in runs.items()},
        {s: dict(v) for s, v in sentences.items() if v},
        deltas,
        varied,
        {s: cfgs[s] for s in rnd.settings},
        files,
    )


MISSING = "<missing>"


def expected_meta(unit: str, eval_seed: int, size: int, delta: int) -> dict[str, Any]:
    """What a file's ``.meta.json`` must say, by dotted key: the qa3 test set of its name's eval seed
    and size (unit ``nt``: token mode, ``ns``: sentence mode), at its run's δ."""
    want: dict[str, Any] = {"task": A.TASK, "seed": eval_seed, "split": "test", "length.tokenizer": "gpt2"}
    want["positions"] = f"relative/{delta}/linspace"
    if unit == "nt":
        want |= {"length.unit": "tokens", "length.num_tokens": size, "num_sentences": None}
        want |= {"length.reserve": 300, "length.min_noise": 10, "length.tokens_per_fact": 8}
    else:
        want |= {"length.unit": "sentences", "num_sentences": size, "length.num_tokens": MISSING}
    return want


def check_meta(name: str, meta: Any, unit: str, eval_seed: int, size: int, delta: int) -> None:
    """Refuse a file whose meta is not the test set its name and run say, naming each key that differs."""

    def get(key: str) -> Any:
        node = meta
        for part in key.split("."):
            node = node.get(part, MISSING) if isinstance(node, dict) else MISSING
        return node

    want = expected_meta(unit, eval_seed, size, delta)
    bad = [f"{k} {get(k)!r} (expected {v!r})" for k, v in want.items() if get(k) != v]
    if bad:
        raise SystemExit(f"{name}: its .meta.json does not match its name and run: {'; '.join(bad)}")


def rebuild(cfg: Any, runs: dict, unit: str = "tokens") -> tuple[dict, int]:
    """{(eval seed, size): {question id: compact haystack}}, each record checked; and the record count."""
    hays, n = {}, 0
    for es in sorted({k[0] for per in runs.values() for k in per}):
        by_q: dict[int, dict[int, list]] = defaultdict(lambda: defaultdict(list))
        for per in runs.values():
            for (s, size), by_seed in per.items():
                if s == es:
                    for rows in by_seed.values():
                        for r in rows:
                            by_q[size][r["id"]].append(r)
                            n += 1
        for size, h in A.rebuild_and_check(cfg, by_q, seed=es, unit=unit).items():
            hays[(es, size)] = h
    for h in (h for per in hays.values() for h in per.values()):
        check_last_object_fact(h)
    return hays, n


def training_sets(rec: Records) -> list[Training]:
    """One set of training haystacks per distinct ``envs.num_sentences`` (and ``envs.long_stories``)
    among the settings, built from a run config of the first setting holding it (δ does not change a
    haystack)."""
    groups: dict[str, list[str]] = {}
    for s, cfg in rec.cfgs.items():
        envs = OmegaConf.to_container(cfg.envs, resolve=True)
        groups.setdefault(json.dumps([envs["num_sentences"], envs.get("long_stories")]), []).append(s)
    out = []
    for key, settings in groups.items():
        sizes, long = json.loads(key)
        hays = A.training_haystacks(rec.cfgs[settings[0]])
        for h in hays:
            check_last_object_fact(h)
        if long and long.get("min_facts") is not None:
            sizes = f"{sizes} (stories of >= {long['min_facts']} facts: {long['num_sentences']})"
        out.append(Training(sizes, tuple(settings), hays))
    return out


def tag(t: Training, trains: Sequence[Training]) -> str:
    """A training set's suffix in labels: none when the round has one."""
    return "" if len(trains) == 1 else f" ({', '.join(t.settings)})"


# ---------------------------------------------------------------- layout


def obj_facts(hay: dict) -> list[int]:
    obj = A.words(hay["question"])[3]
    return sorted(i for i, t in hay["facts"].items() if obj in A.words(t))


def check_last_object_fact(hay: dict) -> None:
    """qa3's obj gold is the story's last fact naming the object (what Δ_obj relies on)."""
    if hay["roles"]["obj"] != obj_facts(hay)[-1]:
        raise SystemExit(f"{hay['question']!r}: the obj gold fact is not the last fact naming the object")


def gap_fraction(n: int, selected: Sequence[int], i: int) -> tuple[int, float]:
    """(gap index, offset / (gap length − 1)) of chunk i: the unfloored relative position (envs/positions.py)."""
    bounds = [0, *sorted(selected), n]
    for j in range(len(bounds) - 1):
        if bounds[j] <= i < bounds[j + 1]:
            return j, (i - bounds[j]) / max(bounds[j + 1] - bounds[j] - 1, 1)
    raise ValueError(f"chunk {i} outside [0, {n})")


def layout(hay: dict) -> dict[str, float]:
    """Δ_obj, Δ_prev (gap fractions to the closest earlier rival in the same gap; NO_RIVAL if none) and
    each gold's distance from the end of its gap, in the role's canonical state."""
    out = {}
    for role, rivals in (("obj", obj_facts(hay)), ("prev", hay["comp"]["prev"])):
        state = [hay["roles"][s] for s in A.CANONICAL_STATE[role]]
        g = hay["roles"][role]
        jg, fg = gap_fraction(hay["n"], state, g)
        earlier = [f for j, f in (gap_fraction(hay["n"], state, c) for c in rivals if c < g) if j == jg]
        out[f"delta_{role}"] = fg - max(earlier) if earlier else NO_RIVAL
        out[f"end_{role}"] = 1.0 - fg
    return out


# ---------------------------------------------------------------- picks


def first_error(r: dict, hay: dict, delta: int) -> dict | None:
    """The first wrong pick of the oracle-stopped episode (None when there is none): its step, kind
    (as analyze.wrong_picks at the run's δ: "tie", the code distance "1" / "2-4" / "≥ 5" to the
    nearest missing gold fact it competes with, "other story" or "noise") and whether it lies earlier
    in the haystack than that gold fact."""
    inv = {g: role for role, g in hay["roles"].items()}
    for t, a in enumerate(A.oracle_prefix(r["pred_idx"], r["sf_idx"])):
        if a in inv:
            continue
        out = {"step": t, "earlier": None}
        if a not in hay["facts"]:
            return out | {"kind": "noise"}
        rivals = [g for g in hay["sf_idx"] if g not in r["pred_idx"][:t] and a in hay["comp"][inv[g]]]
        if not rivals:
            return out | {"kind": "other story"}
        codes = A.codes_at(hay, r["pred_idx"][:t], delta)
        d, g = min((abs(int(codes[a]) - int(codes[g])), g) for g in rivals)
        kind = "tie" if d == 0 else "1" if d == 1 else "2-4" if d <= 4 else "≥ 5"
        return out | {"kind": kind, "earlier": a < g}
    return None


def pick_wrong(r: dict, hay: dict, role: str) -> bool | None:
    """Is the pick made in ``role``'s canonical state a non-gold chunk? None when the episode never
    reaches that state (obj: always reached; prev: the first two picks are obj and Y)."""
    state = [hay["roles"][s] for s in A.CANONICAL_STATE[role]]
    t = len(state)
    if sorted(r["pred_idx"][:t]) != sorted(state):
        return None
    return r["pred_idx"][t] not in hay["sf_idx"]


# ---------------------------------------------------------------- helpers


def seeds_of(per: dict) -> list[int]:
    return sorted(per[K1])


def f1_table(per: dict) -> dict:
    """{(eval seed, nt): {seed: {question id: F1}}}."""
    return {k: A.f1_by_id(v) for k, v in per.items()}


def q_f1(f: dict, key: tuple, q: int, seeds: Sequence[int]) -> float:
    return A.mean(f[key][s][q] for s in seeds)


def question_sets(hays: dict) -> tuple[list[int], list[int]]:
    """The shared questions (1K and 32K) and the 32K set's others."""
    ids1k, ids32 = set(hays[K1]), set(hays[DRAWS[0]])
    return sorted(ids1k & ids32), sorted(ids32 - ids1k)


def in_bins(x: float, edges: Sequence[float]) -> int:
    return next(k for k in range(len(edges) - 1) if edges[k] <= x < edges[k + 1])


def bin_label(edges: Sequence[float], k: int) -> str:
    """[lo, hi), or ≥ lo for an open last bin (DELTA_BINS' 9: no rival counts as Δ = 1)."""
    lo, hi = edges[k], edges[k + 1]
    return f"≥ {lo}" if hi >= 9 else f"[{lo}, {min(hi, 1)})" if hi <= 1 else f"[{lo}, 1]"


# ---------------------------------------------------------------- tables


def scores(rnd: Round, runs: dict, deltas: dict, hays: dict) -> tuple[str, dict]:
    """Table 10a: every setting's means over its seeds (each question set whole), per 32K draw."""
    rows, data = [], {}
    for s in rnd.settings:
        f, seeds = f1_table(runs[s]), seeds_of(runs[s])
        means = {k: A.question_mean(f[k], sorted(f[k]), sorted(hays[k])) for k in f}
        per_run = [[A.mean(f[k][x].values()) for k in DRAWS] for x in seeds]
        d = {
            "delta": deltas[s],
            "seeds": len(seeds),
            **{f"{k[0]}/{A.LENGTH[k[1]]}": v for k, v in means.items()},
            "32K_draws_mean": A.mean(means[k] for k in DRAWS),
            "draw_range": max(means[k] for k in DRAWS) - min(means[k] for k in DRAWS),
            "per_run_draw_range": A.mean(max(p) - min(p) for p in per_run),
            "seeds_128K": len(f.get((42, 128000), {})),
            "seeds_1M": len(f.get((42, 1000000), {})),
        }
        data[s] = d
        rows.append(
            [s, d["delta"], d["seeds"], A.fmt(d["42/1K"])]
            + [A.fmt(d[f"{k[0]}/32K"]) for k in DRAWS]
            + [A.fmt(d["32K_draws_mean"]), A.fmt(d["draw_range"], 2), A.fmt(d["per_run_draw_range"], 2)]
            + [f"{A.fmt(d.get('42/128K'))} ({d['seeds_128K']})", f"{A.fmt(d.get('42/1M'))} ({d['seeds_1M']})"]
        )
    head = ["setting", "δ", "seeds", "1K", "32K draw 42", "draw 43", "draw 44", "32K, 3 draws"]
    head += ["range of the draw means", "range per run (mean)", "128K (seeds)", "1M, 100 q (seeds)"]
    return A.table(head, rows), data


def split_gap(rnd: Round, runs: dict, hays: dict) -> tuple[str, dict]:
    """Table 10b: Table 1's split of the gap with the three 32K draws, and 128K on the shared questions."""
    shared, only = question_sets(hays)
    n = len(shared) + len(only)
    rows, data = [], {}
    for s in rnd.settings:
        f, seeds = f1_table(runs[s]), seeds_of(runs[s])
        one = {q: q_f1(f, K1, q, seeds) for q in shared}
        thirty = {q: A.mean(q_f1(f, k, q, seeds) for k in DRAWS) for q in shared + only}
        s128 = sorted(f.get((42, 128000), {}))  # none: a round without 128K
        d = {
            "shared_1K": A.mean(one.values()),
            "shared_32K": A.mean(thirty[q] for q in shared),
            "shared_128K": A.mean(q_f1(f, (42, 128000), q, s128) for q in shared),
            "only_32K": A.mean(thirty[q] for q in only),
            "only_1K": A.question_mean(f[K1], seeds, sorted(set(hays[K1]) - set(shared))),
        }
        d["part_shared"] = (d["shared_1K"] - d["shared_32K"]) * len(shared) / n
        d["part_set"] = (d["only_1K"] - d["only_32K"]) * len(only) / n
        data[s] = d
        rows.append(
            [s, f"{A.fmt(d['shared_1K'])} → {A.fmt(d['shared_32K'])}", A.fmt(d["shared_32K"] - d["shared_1K"], 2)]
            + [f"{A.fmt(d['shared_128K'])} ({len(s128)})", f"{A.fmt(d['only_1K'])} / {A.fmt(d['only_32K'])}"]
            + [A.fmt(d["part_shared"], 2), A.fmt(d["part_set"], 2)]
        )
    head = [
        "setting",
        f"shared {len(shared)} q: 1K → 32K (3 draws)",
        "change",
        "shared at 128K (seeds)",
        f"the other {len(only)} q: 1K / 32K (3 draws)",
        "gap from shared",
        "gap from set",
    ]
    return A.table(head, rows), data


def tie_rates(hays: dict, shays: dict, trains: Sequence[Training]) -> tuple[str, dict]:
    """Table 10c: share of questions with a tie (any role, canonical states) per haystack draw and δ
    (sentence-mode test sets last)."""
    shared, _ = question_sets(hays)
    sets = [(f"training, {t.sizes} sentences (run seed 1)", t.haystacks, None) for t in trains]
    for key in sorted(hays, key=lambda k: (k[1], k[0])):
        qs = sorted(hays[key])
        sets.append((f"test {A.LENGTH[key[1]]}, eval seed {key[0]}", [hays[key][q] for q in qs], qs))
    for key in sorted(shays, key=lambda k: (k[1], k[0])):
        qs = sorted(shays[key])
        sets.append((f"test S{key[1]}, eval seed {key[0]}", [shays[key][q] for q in qs], qs))
    rows, data = [], {}
    for label, hs, qs in sets:
        tie = {d: [A.margin(h, d) == 0 for h in hs] for d in A.DELTAS if d != 50}
        d_all = {f"d{d}": A.mean(v) for d, v in tie.items()}
        d_sh = {}
        if qs is not None:
            keep = [q in set(shared) for q in qs]
            d_sh = {f"shared_d{d}": A.mean(t for t, k in zip(v, keep) if k) for d, v in tie.items()}
        data[label] = {"questions": len(hs), **d_all, **d_sh}
        rows.append(
            [label, len(hs)]
            + [A.fmt(100 * v, 0) for v in d_all.values()]
            + [A.fmt(100 * d_sh.get(f"shared_d{d}"), 0) if d_sh else "–" for d in tie]
        )
    head = ["haystacks", "questions", "% tie δ=20", "δ=100", "δ=200", "shared q: δ=20", "δ=100", "δ=200"]
    return A.table(head, rows), data


def tie_groups(rnd: Round, runs: dict, deltas: dict, hays: dict) -> tuple[str, dict]:
    """Table 10d: analyze.py's Table 4 over the three 32K draws, ties at each setting's own δ."""
    shared, _ = question_sets(hays)
    rows, data = [], {}
    for s in rnd.settings:
        f, seeds, delta = f1_table(runs[s]), seeds_of(runs[s]), deltas[s]
        tie1 = {q: A.margin(hays[K1][q], delta) == 0 for q in shared}
        cells = [(k, q) for k in DRAWS for q in shared]
        groups = [("all", None, DRAWS)]
        groups += [(f"tie {'y' if a else 'n'}/{'y' if b else 'n'}", (a, b), DRAWS) for a in (0, 1) for b in (0, 1)]
        groups += [(f"tie n/n, draw {k[0]}", (0, 0), (k,)) for k in DRAWS]
        for label, want, keys in groups:
            sel = [
                (k, q)
                for k, q in cells
                if k in keys and (want is None or (tie1[q], A.margin(hays[k][q], delta) == 0) == tuple(map(bool, want)))
            ]
            a = A.mean(q_f1(f, K1, q, seeds) for _, q in sel)
            b = A.mean(q_f1(f, k, q, seeds) for k, q in sel)
            part = (b - a) * len(sel) / (len(shared) * len(keys)) if sel else float("nan")
            data[f"{s}/{label}"] = {"n": len(sel), "1K": a, "32K": b, "part": part}
            rows.append([s, label, len(sel), A.fmt(a), A.fmt(b), A.fmt(b - a, 2), A.fmt(part, 2)])
    head = ["setting", "group (tie at 1K / at 32K)", "question-draws", "F1 1K", "F1 32K", "change"]
    head += ["share of the mean"]
    return A.table(head, rows), data


def error_rows(
    rnd: Round, rec: Records, hays: dict, shays: dict
) -> dict[tuple[str, str], list[tuple[float, dict | None, bool]]]:
    """{(setting, length): [(F1, first error, unfinished)]} of every episode on the shared questions
    (32K: 3 draws), and on the 32K set's other questions; unfinished: the T picks miss a gold fact.
    A length a setting was not evaluated at (128K, S100) has no row."""
    shared, only = (set(x) for x in question_sets(hays))
    out = {}
    for s in rnd.settings:
        for label, runs, hs, keys, qs in (
            ("1K", rec.runs, hays, (K1,), shared),
            ("32K", rec.runs, hays, DRAWS, shared),
            ("128K", rec.runs, hays, ((42, 128000),), shared),
            (f"32K, the other {len(only)} q", rec.runs, hays, DRAWS, only),
            ("S100", rec.sentences, shays, (S100,), shared),
            (f"S100, the other {len(only)} q", rec.sentences, shays, (S100,), only),
        ):
            if not all(k in runs.get(s, {}) for k in keys):
                continue
            out[(s, label)] = [
                (A.oracle_f1(r), first_error(r, hs[k][r["id"]], rec.deltas[s]), A.completion_step(r) is None)
                for k in keys
                for rows in runs[s][k].values()
                for r in rows
                if r["id"] in qs
            ]
    return out


def first_errors(errs: dict) -> tuple[str, dict]:
    """Table 10e: the F1 each episode loses, booked to its first wrong pick's kind and step (per
    episode: the columns of a row add up to its F1 lost)."""
    steps = ("1st pick", "2nd", "3rd", "later")
    rows, data = [], {}
    for (s, length), eps in errs.items():
        n = len(eps)
        by_kind, by_step, earlier, wrong = Counter(), Counter(), 0, 0
        for f1, e, _ in eps:
            if e is None:
                continue
            by_kind[e["kind"]] += (100 - f1) / n
            by_step[steps[min(e["step"], 3)]] += (100 - f1) / n
            wrong += 1
            earlier += bool(e["earlier"])
        loss = 100 - A.mean(f for f, _, _ in eps)
        unfinished = A.mean(u for _, _, u in eps)
        data[f"{s}/{length}"] = {
            "unfinished": unfinished,
            "episodes": n,
            "loss": loss,
            "by_kind": dict(by_kind),
            "by_step": dict(by_step),
            "first_errors": wrong,
            "earlier": earlier,
        }
        rows.append(
            [s, length, n, A.fmt(loss, 2)]
            + [A.fmt(by_kind[k], 2) for k in KINDS]
            + [A.fmt(by_step[k], 2) for k in steps]
            + [f"{earlier} / {wrong}", A.fmt(100 * unfinished)]
        )
    head = ["setting", "length", "episodes", "F1 lost"]
    head += ["tie", "code distance 1", "2-4", "≥ 5", "other story", "noise"]
    head += [f"at the {k}" if k != "later" else "at a later pick" for k in steps]
    head += ["earlier than its gold fact / first errors", "% unfinished"]
    return A.table(head, rows), data


def question_features(rnd: Round, runs: dict, hays: dict) -> tuple[str, dict]:
    """Table 10f: the shared questions' 1K → 32K change (3 draws) by story size, competitors and
    gold span at 32K (the round's two compared settings)."""
    shared, _ = question_sets(hays)

    def facts(k: tuple, q: int) -> int:
        return len(hays[k][q]["facts"])

    def comps(k: tuple, q: int) -> int:
        return sum(len(v) for v in hays[k][q]["comp"].values())

    def span(k: tuple, q: int) -> int:
        return max(hays[k][q]["sf_idx"]) - min(hays[k][q]["sf_idx"])

    features: list[tuple[str, Callable, Sequence[tuple[int, int]]]] = [
        ("story facts", facts, FACT_BINS[:3]),
        ("competitors (3 roles)", comps, COMP_BINS),
        ("gold span at 32K, sentences", span, tuple((lo, hi - 1) for lo, hi in zip(A.SPAN_BINS, A.SPAN_BINS[1:]))),
    ]
    rows, data = [], {}
    for s in rnd.compare:
        f, seeds = f1_table(runs[s]), seeds_of(runs[s])
        for name, fn, bins in features:
            for lo, hi in bins:
                sel = [(k, q) for k in DRAWS for q in shared if lo <= fn(k, q) <= hi]
                a = A.mean(q_f1(f, K1, q, seeds) for _, q in sel)
                b = A.mean(q_f1(f, k, q, seeds) for k, q in sel)
                part = (b - a) * len(sel) / (len(shared) * len(DRAWS))
                data[f"{s}/{name}/{lo}-{hi}"] = {"n": len(sel), "1K": a, "32K": b, "part": part}
                rows.append([s, f"{name} {lo}-{hi}", len(sel), A.fmt(a), A.fmt(b), A.fmt(b - a, 2), A.fmt(part, 2)])
    head = ["setting", "shared questions with", "question-draws", "F1 1K", "F1 32K", "change", "share of the mean"]
    return A.table(head, rows), data


def pick_rows(
    runs: dict, hays: dict, s: str, role: str, keys: Sequence[tuple], only: bool = False
) -> list[tuple[int, dict, bool]]:
    """(question id, layout, wrong) of every episode that reaches ``role``'s state, on the shared
    questions (or, ``only``, on the 32K set's others)."""
    shared = set(question_sets(hays)[1 if only else 0])
    lay = {(k, q): layout(hays[k][q]) for k in keys for q in shared}
    out = []
    for k in keys:
        for rows in runs[s][k].values():
            for r in rows:
                if r["id"] in shared:
                    w = pick_wrong(r, hays[k][r["id"]], role)
                    if w is not None:
                        out.append((r["id"], lay[(k, r["id"])], w))
    return out


def layout_errors(rnd: Round, runs: dict, hays: dict) -> tuple[str, dict]:
    """Table 10g: how often the obj pick (first) and the prev pick (third, from {obj, Y}) go wrong, by
    the gold's layout at that length: Δ to its closest earlier rival and its distance from its gap's end."""
    cols = [(s, length, keys) for s in rnd.compare for length, keys in (("1K", (K1,)), ("32K", DRAWS))]
    rows, data = [], {}
    for role in ("obj", "prev"):
        per = {(s, length): pick_rows(runs, hays, s, role, keys) for s, length, keys in cols}
        for feat, edges in ((f"delta_{role}", DELTA_BINS), (f"end_{role}", END_BINS)):
            label = "Δ" if feat.startswith("delta") else "from the end"
            for k in range(len(edges) - 1):
                row = [role, f"{label} {bin_label(edges, k)}"]
                for col, eps in per.items():
                    w = [wr for _, lay, wr in eps if in_bins(lay[feat], edges) == k]
                    cell = {"episodes": len(w), "wrong": A.mean(w) if w else float("nan")}
                    data[f"{role}/{feat}/{bin_label(edges, k)}/{col[0]}/{col[1]}"] = cell
                    row.append(f"{A.fmt(100 * cell['wrong'])} ({len(w)})")
                rows.append(row)
    head = ["pick", "gold's layout"] + [f"{s} {length}: % wrong (episodes)" for s, length, _ in cols]
    return A.table(head, rows), data


def logistic(x: np.ndarray, y: np.ndarray, iters: int = 30) -> np.ndarray:
    """Weights of a logistic regression (intercept first), Newton's method with a tiny ridge."""
    x = np.column_stack([np.ones(len(x)), x])
    w = np.zeros(x.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-x @ w))
        h = x.T @ (x * (p * (1 - p))[:, None]) + 1e-6 * np.eye(len(w))
        w = w + np.linalg.solve(h, x.T @ (y - p))
    return w


def features(lay: dict, role: str) -> list[float]:
    return [float(np.log(max(lay[f"delta_{role}"], 1e-3))), lay[f"end_{role}"]]


def layout_fit(rnd: Round, runs: dict, hays: dict, trains: Sequence[Training]) -> tuple[str, dict]:
    """Table 10h: a logistic model of a wrong obj / prev pick on the layout features, 1K and 32K pooled
    with a 32K indicator; the indicator's coefficient alone and beside the features (95 % interval of a
    bootstrap over questions, each question's episodes kept together), and the model's mean predicted
    share of wrong picks over the layouts of each haystack set."""
    shared, only = question_sets(hays)
    sets = {}
    for t in trains:
        sets[f"training{tag(t, trains)}"] = [layout(h) for h in t.haystacks]
        sets[f"training{tag(t, trains)}, > 86 facts"] = [layout(h) for h in t.haystacks if len(h["facts"]) > 86]
    sets |= {
        "1K shared": [layout(hays[K1][q]) for q in shared],
        "32K shared": [layout(hays[k][q]) for k in DRAWS for q in shared],
        "32K, the other 27": [layout(hays[k][q]) for k in DRAWS for q in only],
    }
    rng = np.random.default_rng(0)
    rows, data = [], {}
    for role in ("obj", "prev"):
        for s in rnd.compare:
            eps = [(q, 0.0, lay, w) for q, lay, w in pick_rows(runs, hays, s, role, (K1,))]
            eps += [(q, 1.0, lay, w) for q, lay, w in pick_rows(runs, hays, s, role, DRAWS)]
            qid = np.array([e[0] for e in eps])
            is32 = np.array([e[1] for e in eps])
            x = np.array([features(e[2], role) for e in eps])
            y = np.array([float(e[3]) for e in eps])
            full = np.column_stack([x, is32])
            w_alone, w_full = logistic(is32[:, None], y), logistic(full, y)
            rows_of = {q: np.flatnonzero(qid == q) for q in shared}
            boot = []
            for _ in range(BOOT):
                idx = np.concatenate([rows_of[q] for q in rng.choice(shared, len(shared))])
                boot.append([logistic(is32[idx, None], y[idx])[1], logistic(full[idx], y[idx])[3]])
            lo, hi = np.percentile(np.array(boot), [2.5, 97.5], axis=0)
            w_feat = logistic(x, y)  # the features alone: the model the predictions below use
            pred = {
                name: 100 * A.mean(1 / (1 + np.exp(-(w_feat[0] + w_feat[1:] @ features(lay, role)))) for lay in lays)
                for name, lays in sets.items()
            }
            d = {
                "episodes": len(eps),
                "is32K_alone": [float(w_alone[1]), float(lo[0]), float(hi[0])],
                "is32K_with_layout": [float(w_full[3]), float(lo[1]), float(hi[1])],
                "log_delta": float(w_full[1]),
                "end": float(w_full[2]),
                "observed_1K": 100 * A.mean(y[is32 == 0]),
                "observed_32K": 100 * A.mean(y[is32 == 1]),
                "observed_other": 100 * A.mean(w for _, _, w in pick_rows(runs, hays, s, role, DRAWS, only=True)),
                "predicted": pred,
            }
            data[f"{role}/{s}"] = d
            rows.append(
                [role, s, len(eps)]
                + [
                    f"{A.fmt(v[0], 2)} [{A.fmt(v[1], 2)}, {A.fmt(v[2], 2)}]"
                    for v in (d["is32K_alone"], d["is32K_with_layout"])
                ]
                + [A.fmt(d["log_delta"], 2), A.fmt(d["end"], 2)]
                + [f"{A.fmt(d['observed_1K'])} / {A.fmt(d['observed_32K'])} / {A.fmt(d['observed_other'])}"]
                + [A.fmt(v) for v in pred.values()]
            )
    head = ["pick", "setting", "episodes", "32K coefficient alone", "with the layout"]
    head += ["log Δ", "from the end", f"% wrong observed: 1K / 32K / 32K, the other {len(only)}"]
    head += [f"% predicted: {k}" for k in sets]
    return A.table(head, rows), data


def layout_shares(hays: dict, shays: dict, trains: Sequence[Training]) -> tuple[str, dict]:
    """Table 10i: how often each haystack set puts a gold fact in the layouts that go wrong (a test
    length the round lacks has no row)."""
    shared, only = question_sets(hays)
    sets = {}
    for t in trains:
        sets[f"training{tag(t, trains)}, all"] = t.haystacks
        sets[f"training{tag(t, trains)}, ≤ 86 facts"] = [h for h in t.haystacks if len(h["facts"]) <= 86]
        sets[f"training{tag(t, trains)}, > 86 facts"] = [h for h in t.haystacks if len(h["facts"]) > 86]
    sets["1K shared"] = [hays[K1][q] for q in shared]
    sets["32K shared (3 draws)"] = [hays[k][q] for k in DRAWS for q in shared]
    if (42, 128000) in hays:
        sets["128K shared"] = [hays[(42, 128000)][q] for q in shared]
    sets["32K, the other 27 (3 draws)"] = [hays[k][q] for k in DRAWS for q in only]
    if S100 in shays:
        sets["S100 shared"] = [shays[S100][q] for q in shared]
        sets[f"S100, the other {len(only)}"] = [shays[S100][q] for q in only]
    tests = {
        "obj from the end > 0.1": lambda lay: lay["end_obj"] > 0.1,
        "obj Δ < 0.05": lambda lay: lay["delta_obj"] < 0.05,
        "obj Δ < 0.02": lambda lay: lay["delta_obj"] < 0.02,
        "prev Δ < 0.02": lambda lay: lay["delta_prev"] < 0.02,
        "prev Δ < 0.01": lambda lay: lay["delta_prev"] < 0.01,
    }
    rows, data = [], {}
    for name, hs in sets.items():
        lays = [layout(h) for h in hs]
        d = {"haystacks": len(hs), "sentences_per_fact": A.mean(h["n"] / len(h["facts"]) for h in hs)}
        d.update({t: A.mean(fn(lay) for lay in lays) for t, fn in tests.items()})
        data[name] = d
        rows.append([name, len(hs), A.fmt(d["sentences_per_fact"])] + [A.fmt(100 * d[t]) for t in tests])
    head = ["haystacks", "n", "sentences per story fact"] + [f"% {t}" for t in tests]
    return A.table(head, rows), data


def story_lengths(rnd: Round, runs: dict, hays: dict, trains: Sequence[Training]) -> tuple[str, dict]:
    """Table 10j: story sizes in training (sentence mode: every fact kept, N = max(size drawn, facts))
    and in the test sets, with F1 per size (32K: 3 draws, each question set whole). The training
    questions are the same in every training set; the noise around them is each set's own."""
    shared, only = question_sets(hays)
    t_len = Counter(len(h["facts"]) for h in trains[0].haystacks)
    rows, data = [], {}
    for lo, hi in FACT_BINS:
        q32 = [q for q in sorted(hays[DRAWS[0]]) if lo <= len(hays[DRAWS[0]][q]["facts"]) <= hi]
        q1 = [q for q in sorted(hays[K1]) if lo <= len(hays[K1][q]["facts"]) <= hi]
        d = {"training": sum(t_len[n] for n in range(lo, hi + 1))}
        for t in trains:
            tr = [h for h in t.haystacks if lo <= len(h["facts"]) <= hi]
            d[f"training_noise{tag(t, trains)}"] = A.mean(h["n"] - len(h["facts"]) for h in tr)
        d |= {"test_32K": len(q32), "test_1K": len(q1)}
        for s in rnd.settings:
            f, seeds = f1_table(runs[s]), seeds_of(runs[s])
            d[f"{s}/32K"] = A.mean(A.mean(q_f1(f, k, q, seeds) for k in DRAWS) for q in q32)
            d[f"{s}/1K"] = A.mean(q_f1(f, K1, q, seeds) for q in q1)
        data[f"{lo}-{hi}"] = d
        rows.append(
            [f"{lo}-{hi}", d["training"]]
            + [A.fmt(d[f"training_noise{tag(t, trains)}"]) for t in trains]
            + [d["test_1K"], d["test_32K"]]
            + [f"{A.fmt(d[f'{s}/1K'])} / {A.fmt(d[f'{s}/32K'])}" for s in rnd.settings]
        )
    long = sorted(len(hays[DRAWS[0]][q]["facts"]) for q in only)
    data["the_other_27"] = {
        "facts": long,
        "never_in_training": sum(t_len[n] == 0 for n in long),
        "training_at_least": [sum(v for k, v in t_len.items() if k >= n) for n in long],
    }
    head = ["story facts", "training questions"] + [f"noise sentences in training{tag(t, trains)}" for t in trains]
    head += ["1K set", "32K set"] + [f"{s}: F1 1K / 32K" for s in rnd.settings]
    md = A.table(head, rows)
    never = data["the_other_27"]["never_in_training"]
    md += (
        f"\n\nThe other {len(long)} questions' story sizes: {', '.join(map(str, long))}. "
        f"{len(long) - never} of them occur in training questions of the same size, {never} do not."
    )
    return md, data


def long_stories(rnd: Round, rec: Records, hays: dict) -> tuple[str, dict]:
    """Table 10k: the 32K set's questions in two groups, the shared ones and the other ones (the long
    stories, which the 1K set lacks), per setting: 1K, each 32K draw, the draws' mean and S100 (the
    same questions in training-like haystacks). Means over each setting's seeds, question set whole."""
    shared, only = question_sets(hays)
    facts = [len(hays[DRAWS[0]][q]["facts"]) for q in only]
    groups = (
        ("shared", f"shared {len(shared)}", shared),
        ("other", f"the other {len(only)} ({min(facts)}-{max(facts)} story facts)", only),
        ("all", f"32K set, all {len(shared) + len(only)}", shared + only),
    )
    rows, data = [], {}
    for s in rnd.settings:
        f, seeds = f1_table(rec.runs[s]), seeds_of(rec.runs[s])
        fs = f1_table(rec.sentences.get(s, {})).get(S100, {})
        for seed, by_q in fs.items():
            if set(shared + only) - set(by_q):
                raise SystemExit(f"{s} seed {seed}: its S100 file lacks questions of the 32K set")
        for key, label, qs in groups:
            d = {"questions": len(qs), "seeds": len(seeds), "S100_seeds": len(fs)}
            d["1K"] = A.question_mean(f[K1], seeds, qs) if key == "shared" else None
            d |= {f"32K/{k[0]}": A.question_mean(f[k], seeds, qs) for k in DRAWS}
            d["32K"] = A.mean(d[f"32K/{k[0]}"] for k in DRAWS)
            d["S100"] = A.question_mean(fs, sorted(fs), qs) if fs else None
            d["S100-32K"] = d["S100"] - d["32K"] if fs else None
            data[f"{s}/{key}"] = d
            rows.append(
                [s, label, f"{d['seeds']} / {d['S100_seeds']}", A.fmt(d["1K"])]
                + [A.fmt(d[f"32K/{k[0]}"]) for k in DRAWS]
                + [A.fmt(d["32K"]), A.fmt(d["S100"]), A.fmt(d["S100-32K"], 2)]
            )
    head = ["setting", "questions", "seeds (S100)", "1K", "32K draw 42", "draw 43", "draw 44", "32K, 3 draws"]
    head += ["S100", "S100 − 32K"]
    return A.table(head, rows), data


def header(rnd: Round, counts: dict) -> str:
    """The round's heading and what was checked."""
    seeds = ", ".join(map(str, EVAL_SEEDS))
    extra = "".join(f"; {k} {v}" for k, v in counts.items() if k.startswith("envs."))
    modes = f"; sentence mode: {', '.join(counts['sentence_mode'])}" if "sentence_mode" in counts else ""
    return (
        f"## {rnd.title}\n\n{counts['records_checked']} records of {counts['files']} files (eval seeds {seeds}{modes}) "
        f"match their rebuilt haystacks; step sizes {counts['step_sizes']}{extra}.\n"
    )


def tables(rnd: Round = Round(), long: bool = False) -> tuple[list[tuple[str, tuple[str, dict]]], dict]:
    """Every table of the round, titled (``long``: Table 10k too), and the check's counts."""
    rec = read_round(rnd)
    cfg = next(iter(rec.cfgs.values()))
    hays, n = rebuild(cfg, rec.runs)
    shays, n_s = rebuild(cfg, rec.sentences, "sentences")
    trains = training_sets(rec)
    runs, deltas = rec.runs, rec.deltas
    errs = error_rows(rnd, rec, hays, shays)
    out = [
        (f"Table 10a. {rnd.title} by setting and 32K draw (each question set whole)", scores(rnd, runs, deltas, hays)),
        ("Table 10b. The 1K-32K gap split by question set, three 32K draws", split_gap(rnd, runs, hays)),
        ("Table 10c. Ties by haystack draw and step size (model-free)", tie_rates(hays, shays, trains)),
        (
            "Table 10d. Shared questions by ties at each setting's own δ (three 32K draws)",
            tie_groups(rnd, runs, deltas, hays),
        ),
        ("Table 10e. F1 lost per question, by the first wrong pick", first_errors(errs)),
        ("Table 10f. The shared questions' 32K change by question", question_features(rnd, runs, hays)),
        ("Table 10g. Wrong obj and prev picks by the gold fact's layout", layout_errors(rnd, runs, hays)),
        (
            "Table 10h. A layout model of wrong picks, and the layouts' predicted error",
            layout_fit(rnd, runs, hays, trains),
        ),
        ("Table 10i. Hard layouts by haystack set", layout_shares(hays, shays, trains)),
        ("Table 10j. Story sizes in training and test", story_lengths(rnd, runs, hays, trains)),
    ]
    if long:
        out.append(
            ("Table 10k. The long stories and the shared questions, per draw and at S100", long_stories(rnd, rec, hays))
        )
    counts: dict[str, Any] = {"records_checked": n + n_s, "files": rec.files, "step_sizes": deltas}
    for k in rnd.varied:
        if k != "step_size":  # step_sizes above
            counts[f"envs.{k}"] = {s: v[k] for s, v in rec.varied.items()}
    if shays:
        counts["sentence_mode"] = [f"S{size} (eval seed {es})" for es, size in sorted(shays)]
    return out, counts


def names(arg: str) -> tuple[str, ...]:
    return tuple(v for v in arg.split(",") if v)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description='Tables 10a-10k of one round (README.md, "Round 10: finer codes").')
    ap.add_argument("--round", default="round10", help="reads experiments/<round>/runs.tar.xz")
    ap.add_argument("--settings", default="ctrl,d100,d200", help="the settings read, in this order")
    ap.add_argument("--compare", default="ctrl,d100", help="the two settings Tables 10f-10h set side by side")
    ap.add_argument("--varied", default="step_size", help=f"envs keys the settings may differ in (of {SAFE_VARIED})")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    rnd = Round(args.round, names(args.settings), names(args.compare), names(args.varied))
    out, counts = tables(rnd, long=True)
    made = " ".join(["python experiments/qa3_32k/round10.py", *(sys.argv[1:] if argv is None else argv)])
    parts = [
        f"# {rnd.title}, read per question\n\nGenerated by `{made}`. experiments/qa3_32k/README.md "
        '("Round 10: finer codes", "Other rounds") explains the tables.\n',
        header(rnd, counts),
    ]
    parts += [f"### {title}\n\n{md}\n" for title, (md, _) in out]
    print("\n".join(parts))
    data = {"counts": counts} | {title.split(".")[0]: d for title, (_, d) in out}
    if args.json:
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True, default=A._json_default) + "\n")
    return data


if __name__ == "__main__":
    main()
