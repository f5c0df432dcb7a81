"""Answer and retrieval metrics (SPEC §9.2, §9.4, §9.5).

Every metric is a pure function of strings / index lists. Names are stable: the reader scripts
write them into JSONL records and summaries.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from itertools import permutations
from typing import Iterable, Sequence

# --------------------------------------------------------------------------------------------
# Retrieval metrics (§9.2)
# --------------------------------------------------------------------------------------------


def fact_metrics(pred_idx: Iterable[int], sf_idx: Iterable[int]) -> dict[str, float]:
    """Fact EM (all gold retrieved, extras allowed), precision, recall and F1 over index sets.

    Both sets empty -> everything 1.0 (nothing to find, nothing wrongly found).
    """
    p, g = set(pred_idx), set(sf_idx)
    if not p and not g:
        return {"em": 1.0, "precision": 1.0, "recall": 1.0, "f1": 1.0}
    hit = len(p & g)
    precision = hit / len(p) if p else 0.0
    recall = hit / len(g) if g else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"em": 1.0 if g <= p else 0.0, "precision": precision, "recall": recall, "f1": f1}


# --------------------------------------------------------------------------------------------
# BabiLong / NIAH (§9.4)
# --------------------------------------------------------------------------------------------

_ROOMS = ["bathroom", "bedroom", "garden", "hallway", "kitchen", "office"]
_DIRS = ["n", "s", "e", "w"]

TASK_LABELS: dict[str, list[str]] = {
    **{t: _ROOMS for t in ("qa1", "qa2", "qa3", "qa4", "qa11", "qa12", "qa13")},
    "qa5": ["Bill", "Fred", "Jeff", "Mary", "apple", "football", "milk"],
    **{t: ["no", "yes"] for t in ("qa6", "qa9", "qa17", "qa18")},
    "qa7": ["none", "one", "three", "two"],
    "qa8": ["apple", "football", "milk", "nothing"],
    "qa10": ["maybe", "no", "yes"],
    "qa14": ["bedroom", "cinema", "kitchen", "office", "park", "school"],
    "qa15": ["cat", "mouse", "sheep", "wolf"],
    "qa16": ["gray", "green", "white", "yellow"],
    "qa19": [f"{a},{b}" for a, b in permutations(_DIRS, 2)],
    "qa20": ["bedroom", "bored", "garden", "hungry", "kitchen", "thirsty", "tired"],
}

BABI_TASKS = tuple(f"qa{i}" for i in range(1, 21))
NIAH_TASKS = ("niah", "niahmv")


def task_key(task: str) -> str:
    """Short task key from a long or short name.

    ``qa3_three-supporting-facts`` / ``qa3`` -> ``qa3``; ``niah``, ``niah_single_1`` -> ``niah``;
    ``niahmv``, ``mv_niah``, ``niah_multivalue`` -> ``niahmv``. Unknown names raise ValueError.
    """
    t = task.strip().lower()
    m = re.match(r"^qa(\d+)(?:_|$)", t)
    if m and 1 <= int(m.group(1)) <= 20:
        return f"qa{int(m.group(1))}"
    if "niah" in t:
        return "niahmv" if ("mv" in t or "multivalue" in t or "multi_value" in t) else "niah"
    raise ValueError(
        f"unknown task {task!r}: expected qa1..qa20 (short or full bAbI file name), niah or niahmv"
    )


def babilong_em(output: str, target: str) -> float:
    """The reference's exact match (kept as is, SPEC §9.4 / §11 #25).

    Strip spaces and periods from both ends of the output, take its last whitespace-separated
    token, split that and the target on commas, compare as sets. Case-sensitive.
    """
    cleaned = output.strip(" .")
    tokens = cleaned.split()
    last = tokens[-1] if tokens else ""
    return 1.0 if set(last.split(",")) == set(target.split(",")) else 0.0


_ECHO_MARKERS = ("<context>", "<example>", "question:")
_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NUM_RE = re.compile(r"(?<![\w.-])\d+(?![\w-])")


def _first_sentence(text: str) -> str:
    """Text up to the first sentence end ('.', '!', '?', newline); commas are kept (qa8, qa19)."""
    text = text.strip()
    m = re.search(r"[.!?\n]", text)
    return text[: m.start()] if m else text


def _clean_output(output: str) -> str:
    out = output.lower()
    cut = len(out)
    for marker in _ECHO_MARKERS:
        pos = out.find(marker)
        if pos != -1:
            cut = min(cut, pos)
    return out[:cut]


def _gold_set(target: str) -> set[str]:
    return {t.strip().lower() for t in target.split(",") if t.strip()}


def babilong_acc(output: str, target: str, question: str, task: str) -> float:
    """Robust accuracy in the style of the official BabiLong scorer (SPEC §9.4).

    Lower-case; cut at the first echoed ``<context>``/``<example>``/``question:``; keep the first
    sentence; candidates = the task's labels minus labels occurring in the question; found = the
    candidates occurring as whole tokens; correct iff found equals the comma-split target set.
    For qa19 a label ``x,y`` is found when the two letters appear in that order as whole tokens
    separated by a comma and/or spaces ("n, e", "n,e", "n e").
    """
    key = task_key(task)
    if key in NIAH_TASKS:
        return niah_metrics(output, target)["acc"]
    text = _first_sentence(_clean_output(output))
    q = question.lower()
    q_tokens = set(re.findall(r"[a-z]+", q))
    found: set[str] = set()
    for label in TASK_LABELS[key]:
        lab = label.lower()
        if key == "qa19":
            a, b = lab.split(",")
            if re.search(rf"(?<![a-z]){a}\s*,?\s*{b}(?![a-z])", text):
                found.add(lab)
            continue
        if lab in q_tokens:
            continue
        if re.search(rf"(?<![a-z]){re.escape(lab)}(?![a-z])", text):
            found.add(lab)
    if key == "qa19" and len(found) > 1:
        # Overlapping matches ("n, e, s" finds n,e and e,s): keep the first pair only.
        first = min(found, key=lambda lab: re.search(
            rf"(?<![a-z]){lab[0]}\s*,?\s*{lab[2]}(?![a-z])", text).start())
        found = {first}
    gold = _gold_set(target)
    if key == "qa19":
        gold = {target.replace(" ", "").lower()}
    return 1.0 if found == gold else 0.0


def babilong_f1(output: str, target: str, task: str) -> float:
    """The reference's label F1 (SPEC §9.4): labels occurring as *substrings* of each lower-cased
    side (so 'no' matches inside 'none'); both empty -> 1, one empty -> 0, else set F1."""
    key = task_key(task)
    if key in NIAH_TASKS:
        return niah_metrics(output, target)["f1"]
    labels = [lab.lower() for lab in TASK_LABELS[key]]
    out, tgt = output.lower(), target.lower()
    p = {lab for lab in labels if lab in out}
    g = {lab for lab in labels if lab in tgt}
    if not p and not g:
        return 1.0
    if not p or not g:
        return 0.0
    hit = len(p & g)
    if hit == 0:
        return 0.0
    prec, rec = hit / len(p), hit / len(g)
    return 2 * prec * rec / (prec + rec)


def niah_metrics(output: str, target: str) -> dict[str, float]:
    """NIAH / multi-value NIAH: acc (the set of uuid- or number-shaped tokens in the cleaned output
    equals the gold set), recall (fraction of gold values occurring as substrings, RULER-style),
    and a set F1 over those shaped tokens."""
    gold = _gold_set(target)
    text = _clean_output(output)
    found = set(_UUID_RE.findall(text))
    masked = _UUID_RE.sub(" ", text)
    found |= set(_NUM_RE.findall(masked))
    recall = sum(1 for g in gold if g in output.lower()) / len(gold) if gold else 1.0
    hit = len(found & gold)
    if not found and not gold:
        f1 = 1.0
    elif hit == 0:
        f1 = 0.0
    else:
        prec, rec = hit / len(found), hit / len(gold)
        f1 = 2 * prec * rec / (prec + rec)
    return {"acc": 1.0 if found == gold else 0.0, "recall": recall, "f1": f1}


def synthetic_scores(output: str, target: str, question: str, task: str) -> dict[str, float]:
    """All per-sample reader metrics for a BabiLong/NIAH record: em (ref), acc (robust), f1
    (ref label F1), plus recall for NIAH tasks."""
    key = task_key(task)
    scores = {"em": babilong_em(output, target)}
    if key in NIAH_TASKS:
        nm = niah_metrics(output, target)
        scores.update(acc=nm["acc"], f1=nm["f1"], recall=nm["recall"])
    else:
        scores.update(acc=babilong_acc(output, target, question, key), f1=babilong_f1(output, target, key))
    return scores


# --------------------------------------------------------------------------------------------
# Open-domain QA, SQuAD style (§9.5)
# --------------------------------------------------------------------------------------------

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD normalisation in SQuAD's order: lower-case, drop punctuation, articles -> spaces,
    collapse whitespace (the leading strip is implied by the final split/join)."""
    s = s.strip().lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def squad_em(prediction: str, gold: str) -> float:
    return 1.0 if normalize_answer(prediction) == normalize_answer(gold) else 0.0


def squad_f1(prediction: str, gold: str, legacy_empty: bool = False) -> float:
    """Token-multiset F1 after normalisation.

    SQuAD convention (default): if either side normalises to no tokens, F1 = 1 iff both do.
    ``legacy_empty`` (``legacy.qa_f1_empty_conventions``): the reference's rule, empty gold gives
    recall 1 and empty prediction precision 1, so F1 > 0 is possible with one side empty.
    """
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not legacy_empty:
        if not p or not g:
            return 1.0 if p == g else 0.0
        common = Counter(p) & Counter(g)
        hit = sum(common.values())
        if hit == 0:
            return 0.0
        prec, rec = hit / len(p), hit / len(g)
        return 2 * prec * rec / (prec + rec)
    hit = sum((Counter(p) & Counter(g)).values())
    prec = hit / len(p) if p else 1.0
    rec = hit / len(g) if g else 1.0
    return 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0


def qa_scores(
    prediction: str,
    answer: str,
    aliases: Sequence[str] | None = None,
    ignore_aliases: bool = False,
    legacy_empty: bool = False,
) -> dict[str, float]:
    """EM and F1, each the maximum over ``answer`` and its aliases (unless ``ignore_aliases``,
    ``legacy.ignore_answer_aliases``)."""
    golds = [answer] + ([] if ignore_aliases else [a for a in (aliases or []) if a is not None])
    return {
        "EM": max(squad_em(prediction, g) for g in golds),
        "F1": max(squad_f1(prediction, g, legacy_empty=legacy_empty) for g in golds),
    }
