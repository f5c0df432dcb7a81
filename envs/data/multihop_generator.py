"""Synthetic multi-hop QA over an invented world, written in the real dataset formats, so the
open-QA environment and the reader scripts run end to end offline.

A *world* (seeded per split) holds invented people, companies, cities and countries with
facts linking them (born in, works for, founded by, headquartered in, located in, capital,
currency). Every entity has one encyclopedia-style paragraph (title = its name). From it:

* HotpotQA format (``make_hotpotqa``): 2-hop *bridge* and *comparison* questions, 10
  paragraphs each (2 gold + 8 distractors, shuffled), ``supporting_facts`` = [title, sentence].
* 2WikiMultihopQA format (``make_2wiki``): the same questions with ``type``
  (compositional / comparison) and ``evidences`` triples.
* MuSiQue format (``make_musique``): 2-4-hop chains, 20 paragraphs, a
  ``question_decomposition`` in reasoning order with ``paragraph_support_idx``, and
  ``answer_aliases``.
* RULER QA format (``make_ruler_qa``): HotpotQA-format records turned into RULER's
  ``Document N:`` prompt with a ``QUESTION:`` marker, plus ``gold_docs`` (the numbers of the
  gold documents) so the gold stays recoverable.

Everything is deterministic given (seed, split): generators come from envs.seeding.derive_rng.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.seeding import derive_rng

_ONSETS = "b br c d dr f g gr h k l m n p pr r s st t tr v z".split()
_VOWELS = "a e i o u ae ai ei ou".split()
_CODAS = ["", "", "n", "r", "l", "s", "th", "m", "nd", "rk"]
_OCCUPATIONS = [
    "painter",
    "engineer",
    "novelist",
    "botanist",
    "composer",
    "architect",
    "chemist",
    "sculptor",
    "historian",
    "astronomer",
]
_INDUSTRIES = ["shipping", "textile", "software", "mining", "publishing", "brewing", "aerospace", "insurance"]
_ORG_SUFFIX = ["Industries", "Works", "Group", "Labs", "Holdings", "Company"]


def _word(rng: np.random.Generator, syllables: int) -> str:
    parts = []
    for _ in range(syllables):
        parts.append(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))])
    parts.append(_CODAS[rng.integers(len(_CODAS))])
    return "".join(parts).capitalize()


def _an(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


@dataclass
class Entity:
    name: str
    kind: str  # person | org | city | country
    attrs: dict[str, Any] = field(default_factory=dict)
    sentences: list[str] = field(default_factory=list)


class World:
    """Invented entities and their paragraphs (one per entity)."""

    def __init__(
        self, seed: int, split: str, n_people: int = 240, n_orgs: int = 80, n_cities: int = 60, n_countries: int = 16
    ):
        rng = derive_rng(seed, "multihop-world", split)
        used: set[str] = set()

        def fresh(make) -> str:
            for _ in range(10000):
                name = make()
                if name not in used:
                    used.add(name)
                    return name
            raise RuntimeError("name space exhausted")

        self.countries = [Entity(fresh(lambda: _word(rng, 2) + "ia"), "country") for _ in range(n_countries)]
        self.cities = [Entity(fresh(lambda: _word(rng, 2)), "city") for _ in range(n_cities)]
        self.orgs = [
            Entity(fresh(lambda: f"{_word(rng, 2)} {_ORG_SUFFIX[rng.integers(len(_ORG_SUFFIX))]}"), "org")
            for _ in range(n_orgs)
        ]
        self.people = [Entity(fresh(lambda: f"{_word(rng, 2)} {_word(rng, 2)}"), "person") for _ in range(n_people)]
        used_years: set[int] = set()

        def year(lo: int, hi: int) -> int:  # distinct years keep comparisons unambiguous
            for _ in range(1000):
                y = int(rng.integers(lo, hi))
                if y not in used_years:
                    used_years.add(y)
                    return y
            return int(rng.integers(lo, hi))

        for c in self.countries:
            c.attrs = {"currency": fresh(lambda: _word(rng, 1).lower() + " crown"), "capital": None}
        for i, c in enumerate(self.cities):
            country = self.countries[i % n_countries]  # every country gets cities
            c.attrs = {
                "country": country.name,
                "founded": year(900, 1700),
                "population": int(rng.integers(20, 900)) * 1000,
            }
            if country.attrs["capital"] is None:
                country.attrs["capital"] = c.name
        for p in self.people:
            p.attrs = {
                "born": year(1850, 1990),
                "birthplace": self.cities[rng.integers(n_cities)].name,
                "occupation": _OCCUPATIONS[rng.integers(len(_OCCUPATIONS))],
                "employer": self.orgs[rng.integers(n_orgs)].name,
            }
        for o in self.orgs:
            o.attrs = {
                "founded": year(1880, 2015),
                "founder": self.people[rng.integers(n_people)].name,
                "hq": self.cities[rng.integers(n_cities)].name,
                "industry": _INDUSTRIES[rng.integers(len(_INDUSTRIES))],
            }
        self.by_name = {e.name: e for e in self.countries + self.cities + self.orgs + self.people}
        for e in self.by_name.values():
            e.sentences = self._sentences(e)
        self.rng = rng

    def _sentences(self, e: Entity) -> list[str]:
        a = e.attrs
        if e.kind == "person":
            first = e.name.split()[0]
            return [
                f"{e.name} is {_an(a['occupation'])} born in {a['born']}.",
                f"{first} was born in the city of {a['birthplace']}.",
                f"{first} works for {a['employer']}.",
            ]
        if e.kind == "org":
            return [
                f"{e.name} is {_an(a['industry'])} company founded in {a['founded']}.",
                f"It was founded by {a['founder']}.",
                f"Its headquarters are in {a['hq']}.",
            ]
        if e.kind == "city":
            return [
                f"{e.name} is a city in {a['country']}.",
                f"It was founded in {a['founded']}.",
                f"It has about {a['population']} inhabitants.",
            ]
        return [
            f"{e.name} is a country whose capital is {a['capital']}.",
            f"Its currency is the {a['currency']}.",
        ]

    def pick(self, kind: str) -> Entity:
        pool = {"person": self.people, "org": self.orgs, "city": self.cities, "country": self.countries}[kind]
        return pool[int(self.rng.integers(len(pool)))]

    def distractors(self, exclude: set[str], n: int) -> list[Entity]:
        names = [x for x in self.by_name if x not in exclude]
        chosen = self.rng.choice(len(names), size=n, replace=False)
        return [self.by_name[names[int(i)]] for i in chosen]


# ---------------------------------------------------------------- 2-hop questions (HotpotQA / 2Wiki)


def _two_hop(w: World) -> tuple[str, str, str, list[tuple[Entity, int]]]:
    """(question, answer, type, gold [(entity, sentence id)] in reasoning order)."""
    kind = int(w.rng.integers(6))
    if kind == 0:
        p = w.pick("person")
        c = w.by_name[p.attrs["birthplace"]]
        return f"In which country was {p.name} born?", c.attrs["country"], "bridge", [(p, 1), (c, 0)]
    if kind == 1:
        o = w.pick("org")
        p = w.by_name[o.attrs["founder"]]
        return f"In what year was the founder of {o.name} born?", str(p.attrs["born"]), "bridge", [(o, 1), (p, 0)]
    if kind == 2:
        p = w.pick("person")
        o = w.by_name[p.attrs["employer"]]
        return (
            f"In which city is the headquarters of the company that {p.name} works for?",
            o.attrs["hq"],
            "bridge",
            [(p, 2), (o, 2)],
        )
    if kind == 3:
        a, b = w.pick("person"), w.pick("person")
        while b.name == a.name:
            b = w.pick("person")
        ans = a if a.attrs["born"] < b.attrs["born"] else b
        return f"Who was born earlier, {a.name} or {b.name}?", ans.name, "comparison", [(a, 0), (b, 0)]
    if kind == 4:
        a, b = w.pick("org"), w.pick("org")
        while b.name == a.name:
            b = w.pick("org")
        ans = a if a.attrs["founded"] < b.attrs["founded"] else b
        return f"Which company was founded earlier, {a.name} or {b.name}?", ans.name, "comparison", [(a, 0), (b, 0)]
    a = w.pick("city")
    # half of the pairs share a country, so "yes" and "no" are both common
    want_same = bool(w.rng.random() < 0.5)
    pool = [c for c in w.cities if c.name != a.name and (c.attrs["country"] == a.attrs["country"]) == want_same]
    b = pool[int(w.rng.integers(len(pool)))] if pool else next(c for c in w.cities if c.name != a.name)
    same = "yes" if a.attrs["country"] == b.attrs["country"] else "no"
    return f"Are {a.name} and {b.name} located in the same country?", same, "comparison", [(a, 0), (b, 0)]


def _context(w: World, gold: list[Entity], n_paragraphs: int) -> list[Entity]:
    names = {e.name for e in gold}
    unique_gold = list({e.name: e for e in gold}.values())
    paras = unique_gold + w.distractors(names, n_paragraphs - len(unique_gold))
    return [paras[int(i)] for i in w.rng.permutation(len(paras))]


def make_hotpotqa(
    seed: int, split: str, n: int, n_paragraphs: int = 10, id_prefix: str = "synhp"
) -> list[dict[str, Any]]:
    """``n`` HotpotQA-format records (distractor setting)."""
    w = World(seed, f"hotpotqa/{split}")
    out = []
    for i in range(n):
        q, a, qtype, gold = _two_hop(w)
        paras = _context(w, [e for e, _ in gold], n_paragraphs)
        out.append(
            {
                "_id": f"{id_prefix}_{split}_{i:06d}",
                "question": q,
                "answer": a,
                "type": qtype,
                "level": "medium",
                "supporting_facts": [[e.name, sid] for e, sid in gold],
                "context": [[e.name, list(e.sentences)] for e in paras],
            }
        )
    return out


def make_2wiki(seed: int, split: str, n: int, n_paragraphs: int = 10) -> list[dict[str, Any]]:
    """``n`` 2WikiMultihopQA-format records (HotpotQA fields + ``type`` and ``evidences``)."""
    w = World(seed, f"2wiki/{split}")
    out = []
    for i in range(n):
        q, a, qtype, gold = _two_hop(w)
        paras = _context(w, [e for e, _ in gold], n_paragraphs)
        out.append(
            {
                "_id": f"syn2w_{split}_{i:06d}",
                "type": "compositional" if qtype == "bridge" else "comparison",
                "question": q,
                "answer": a,
                "supporting_facts": [[e.name, sid] for e, sid in gold],
                "evidences": [[e.name, "fact", e.sentences[sid]] for e, sid in gold],
                "context": [[e.name, list(e.sentences)] for e in paras],
            }
        )
    return out


# ---------------------------------------------------------------- 2-4-hop chains (MuSiQue)


def _chain(w: World, hops: int) -> tuple[str, str, list[str], list[tuple[Entity, str, str]]]:
    """(question, answer, aliases, hops [(entity, sub-question, sub-answer)] in reasoning order)."""
    if hops == 2 and w.rng.random() < 0.5:
        c = w.pick("city")
        k = w.by_name[c.attrs["country"]]
        steps = [(c, f"In which country is {c.name}?", k.name), (k, "What is the capital of #1?", k.attrs["capital"])]
        return f"What is the capital of the country where {c.name} is located?", k.attrs["capital"], [], steps
    p = w.pick("person")
    o = w.by_name[p.attrs["employer"]]
    city = w.by_name[o.attrs["hq"]]
    k = w.by_name[city.attrs["country"]]
    steps = [
        (p, f"Which company does {p.name} work for?", o.name),
        (o, "Where are the headquarters of #1?", city.name),
        (city, "In which country is #2?", k.name),
        (k, "What is the currency of #3?", k.attrs["currency"]),
    ][:hops]
    questions = {
        2: f"In which city are the headquarters of the company that {p.name} works for?",
        3: f"In which country are the headquarters of the company that {p.name} works for?",
        4: f"What is the currency of the country where the company that {p.name} works for has its headquarters?",
    }
    answer = steps[-1][2]
    aliases = [k.attrs["currency"].split()[0]] if hops == 4 else []
    return questions[hops], answer, aliases, steps


def make_musique(seed: int, split: str, n: int, n_paragraphs: int = 20) -> list[dict[str, Any]]:
    """``n`` MuSiQue-Ans-format records with 2-4 hops."""
    w = World(seed, f"musique/{split}")
    out = []
    for i in range(n):
        hops = int(w.rng.integers(2, 5))
        q, a, aliases, steps = _chain(w, hops)
        paras = _context(w, [e for e, _, _ in steps], n_paragraphs)
        pos = {e.name: j for j, e in enumerate(paras)}
        gold = {e.name for e, _, _ in steps}
        out.append(
            {
                "id": f"{hops}hop__synmq_{split}_{i:06d}",
                "paragraphs": [
                    {
                        "idx": j,
                        "title": e.name,
                        "paragraph_text": " ".join(e.sentences),
                        "is_supporting": e.name in gold,
                    }
                    for j, e in enumerate(paras)
                ],
                "question": q,
                "question_decomposition": [
                    {"id": k, "question": sq, "answer": sa, "paragraph_support_idx": pos[e.name]}
                    for k, (e, sq, sa) in enumerate(steps)
                ],
                "answer": a,
                "answer_aliases": aliases,
                "answerable": True,
            }
        )
    return out


# ---------------------------------------------------------------- RULER QA format

RULER_QA_INSTRUCTION = (
    "Answer the question based on the given documents. Only give me the answer and do not output any other words."
)


def make_ruler_qa(hotpot_records: list[dict[str, Any]], seed: int, extra_docs: int = 10) -> list[dict[str, Any]]:
    """RULER QA records (``index``, ``input``, ``outputs``, ``gold_docs``, ``answer_prefix``)
    from HotpotQA-format records: each record's paragraphs plus ``extra_docs`` distractor
    paragraphs borrowed from other records, shuffled, numbered ``Document 1:`` …"""
    rng = derive_rng(seed, "ruler-qa")
    pool = [(t, s) for rec in hotpot_records for t, s in rec["context"]]
    out = []
    for i, rec in enumerate(hotpot_records):
        own = {t for t, _ in rec["context"]}
        gold_titles = {t for t, _ in rec["supporting_facts"]}
        extra: dict[str, list[str]] = {}
        while len(extra) < extra_docs:
            t, s = pool[int(rng.integers(len(pool)))]
            if t not in own:
                extra[t] = s
        docs = list(rec["context"]) + [[t, s] for t, s in extra.items()]
        docs = [docs[int(j)] for j in rng.permutation(len(docs))]
        body = "\n\n".join(f"Document {k + 1}:\n{t}\n{' '.join(s)}" for k, (t, s) in enumerate(docs))
        text = (
            f"{RULER_QA_INSTRUCTION}\n\nThe following are given documents.\n\n{body}\n\n"
            f"{RULER_QA_INSTRUCTION}\n\nQUESTION: {rec['question']}"
        )
        out.append(
            {
                "index": i,
                "input": text,
                "outputs": [rec["answer"]],
                "gold_docs": [k + 1 for k, (t, _) in enumerate(docs) if t in gold_titles],
                "answer_prefix": " Answer:",
            }
        )
    return out


def dumps_json_array(records: list[dict[str, Any]]) -> str:
    return json.dumps(records, ensure_ascii=False)
