"""Statistics of a bAbI qa1-qa5 file, for putting generated and real files side by side.

:func:`story_stats` reads the lines of one file (real or generated), classifies every statement
(move, get, drop, give, relation) and every question, and returns one flat dict of numbers per
file: story shape, statement mix, "there" suffixes, question forms, answers, repeats, the kinds
and order of the supporting facts and how far each lies before its question. ``STATS`` says which
of them the fidelity report shows for each task and how far a generated value may stray from the
real one (experiments/babi_fidelity/babi_fidelity.py, tests/data_babilong/test_babi_fidelity.py).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from envs.data.common import open_text

_NAME = r"([A-Z][a-z]+)"
_STATEMENTS = (
    ("move", re.compile(rf"^{_NAME} (?:moved|went|journeyed|travelled|went back) to the (\w+)\.$")),
    ("get", re.compile(rf"^{_NAME} (?:got|grabbed|picked up|took) the (\w+)( there)?\.$")),
    ("drop", re.compile(rf"^{_NAME} (?:dropped|discarded|put down|left) the (\w+)( there)?\.$")),
    ("give", re.compile(rf"^{_NAME} (?:gave|handed|passed) the (\w+) to {_NAME}\.$")),
    ("rel", re.compile(r"^The (\w+) is (north|south|east|west) of the (\w+)\.$")),
)
DIRECTIONS = ("north", "south", "east", "west")
_STEP = {"north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}


@dataclass
class Stmt:
    line: int  # story line number
    pos: int  # 1-based index among the story's statements
    kind: str
    args: tuple  # regex groups: (who, place) / (who, object, there) / (giver, object, receiver) / (x, dir, y)


@dataclass
class Question:
    line: int
    text: str  # without the trailing space
    answer: str
    support: list[int]  # line numbers in file order
    n_before: int  # statements of the story before the question
    spaced: bool  # a space before the tab, as in every real task but qa4


@dataclass
class Story:
    stmts: list[Stmt] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    items: list[Stmt | Question] = field(default_factory=list)  # in file order


def read_stories(lines: list[str], where: str = "<lines>") -> list[Story]:
    """Stories of a bAbI file; an unknown statement or malformed line raises ValueError naming it."""
    stories: list[Story] = []
    for ln, raw in enumerate(lines, start=1):
        line = raw.rstrip("\n")
        head, _, text = line.partition(" ")
        if not head.isdigit():
            raise ValueError(f"{where}:{ln}: no line number in {line!r}")
        n = int(head)
        if n == 1:
            stories.append(Story())
        if not stories:
            raise ValueError(f"{where}:{ln}: the first story does not start at 1")
        st = stories[-1]
        if "\t" in text:
            q, ans, sup = text.split("\t")
            item: Stmt | Question = Question(
                n, q.strip(), ans, [int(s) for s in sup.split()], len(st.stmts), q.endswith(" ")
            )
            st.questions.append(item)
        else:
            for kind, rx in _STATEMENTS:
                if m := rx.match(text):
                    item = Stmt(n, len(st.stmts) + 1, kind, m.groups())
                    st.stmts.append(item)
                    break
            else:
                raise ValueError(f"{where}:{ln}: unknown statement {text!r}")
        st.items.append(item)
    return stories


def read_lines(path: Path) -> list[str]:
    """Lines of a bAbI file (``.txt`` or ``.txt.gz``) without their newlines."""
    with open_text(Path(path)) as f:
        return f.read().splitlines()


def first_questions(lines: list[str], n: int) -> list[str]:
    """The whole stories at the start of a file that hold its first ``n`` questions."""
    asked = 0
    for i, line in enumerate(lines):
        if asked >= n and line.partition(" ")[0] == "1":
            return lines[:i]
        asked += "\t" in line
    return lines


def question_form(text: str) -> str:
    """The question with its names, objects, rooms and directions replaced by placeholders."""
    text = re.sub(r"\b(north|south|east|west)\b", "D", text)
    text = re.sub(r"\bthe [a-z]+", "the X", text)
    return re.sub(r"\b(?!Where\b|What\b|Who\b)[A-Z][a-z]+", "P", text)


def _share(flags) -> float:
    flags = list(flags)
    return float(np.mean(flags)) if flags else float("nan")


def _tv(a: Counter, b: Counter) -> float:
    """Total-variation distance between two count tables (0 = same shares, 1 = disjoint)."""
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[k] / na - b[k] / nb) for k in set(a) | set(b))


@dataclass
class FileStats:
    """Numbers (``values``) and count tables (``tables``, compared by total-variation distance)."""

    values: dict[str, float]
    tables: dict[str, Counter]


def story_stats(task: str, lines: list[str], where: str = "<lines>") -> FileStats:
    stories = read_stories(lines, where)
    v: dict[str, float] = {}
    t: dict[str, Counter] = {}
    qs = [(s, q) for s in stories for q in s.questions]
    by_line = [{x.line: x for x in s.stmts} for s in stories]
    gaps = []
    for s in stories:
        prev = 0
        for q in s.questions:
            gaps.append(q.n_before - prev)
            prev = q.n_before
    v["questions per story"] = len(qs) / len(stories)
    v["statements per story"] = float(np.mean([len(s.stmts) for s in stories]))
    v["statements before a question"] = float(np.mean([q.n_before for _, q in qs]))
    v["statements between questions"] = float(np.mean(gaps))
    v["share of gaps of 2 statements"] = _share(g == 2 for g in gaps)
    v["90th percentile gap"] = float(np.percentile(gaps, 90))
    kinds = Counter(x.kind for s in stories for x in s.stmts)
    total = sum(kinds.values())
    for k in ("move", "get", "drop", "give", "rel"):
        v[f"share of {k} statements"] = kinds[k] / total
    follows = Counter((a.kind, b.kind) for s in stories for a, b in zip(s.stmts, s.stmts[1:]))
    for a, b in (("drop", "get"), ("give", "give")):
        after_a = sum(n for (x, _), n in follows.items() if x == a)
        v[f"a {a} is followed by a {b}"] = follows[(a, b)] / after_a if after_a else float("nan")
    for k in ("get", "drop"):
        v[f"{k}s ending in 'there'"] = _share(bool(x.args[2]) for s in stories for x in s.stmts if x.kind == k)
    t["question forms"] = Counter(question_form(q.text) for _, q in qs)
    v["questions with a space before the tab"] = _share(q.spaced for _, q in qs)
    t["vocabulary"] = Counter(w for line in lines for w in re.findall(r"[A-Za-z]+", line.split("\t")[0]))
    t["answers"] = Counter(q.answer for _, q in qs)
    repeats = []
    for s in stories:
        repeats += [(a.text, a.answer) == (b.text, b.answer) for a, b in zip(s.questions, s.questions[1:])]
    v["question repeats the previous one"] = _share(repeats)
    pattern, dist = Counter(), {}
    for si, s in enumerate(stories):
        for q in s.questions:
            _gold(q, by_line[si], pattern, dist)
    t["gold-fact kinds in listed order"] = pattern
    v["supporting facts per question"] = float(np.mean([len(q.support) for _, q in qs]))
    for j in sorted(k for k in dist if isinstance(k, int)):
        v[f"distance of gold fact {j + 1} (mean)"] = float(np.mean(dist[j]))
    v["distance of the latest gold fact (mean)"] = float(np.mean(dist["latest"]))
    v["latest gold fact at most 5 back"] = _share(d <= 5 for d in dist["latest"])
    v["distance of the earliest gold fact (90th pct)"] = float(np.percentile(dist["earliest"], 90))
    TASK_STATS[task](stories, v)
    return FileStats(v, t)


def _gold(q: Question, by_line: dict[int, Stmt], pattern: Counter, dist: dict) -> None:
    """Count the kinds of ``q``'s supporting facts (in listed order) and how far back each lies
    (1 = the statement just before the question)."""
    back = [q.n_before - by_line[i].pos + 1 for i in q.support]
    pattern[",".join(by_line[i].kind for i in q.support)] += 1
    for j, d in enumerate(back):
        dist.setdefault(j, []).append(d)
    dist.setdefault("latest", []).append(min(back))
    dist.setdefault("earliest", []).append(max(back))


# ---- task-specific numbers ----------------------------------------------------------------------
def _spells(story: Story):
    """Walk a story; yield (item, state) with state = {object: (last get/drop Stmt, carrier moves
    in that carrying spell)} just before each question."""
    last: dict[str, Stmt] = {}
    spell: dict[str, list[Stmt]] = {}
    holder: dict[str, str] = {}
    for x in story.items:
        if isinstance(x, Question):
            yield x, last, spell
            continue
        if x.kind == "move":
            for o, h in holder.items():
                if h == x.args[0]:
                    spell[o].append(x)
        elif x.kind == "get":
            holder[x.args[1]] = x.args[0]
            last[x.args[1]], spell[x.args[1]] = x, []
        elif x.kind == "drop":
            holder.pop(x.args[1], None)
            last[x.args[1]] = x
        elif x.kind == "give":
            holder[x.args[1]] = x.args[2]


def _qa1(stories: list[Story], v: dict) -> None:
    by = [{x.line: x for x in s.stmts} for s in stories]
    asked_last_mover = [
        by[i][q.support[0]].args[0] == s.stmts[q.n_before - 1].args[0]
        for i, s in enumerate(stories)
        for q in s.questions
    ]
    v["asks about the person who moved last"] = _share(asked_last_mover)


def _qa2(stories: list[Story], v: dict) -> None:
    dropped, move_first = [], []
    for s in stories:
        by = {x.line: x for x in s.stmts}
        for q in s.questions:
            kinds = [by[i].kind for i in q.support]
            dropped.append("drop" in kinds)
            move_first.append(sorted(q.support)[0] in [i for i in q.support if by[i].kind == "move"])
    v["asks about a dropped object"] = _share(dropped)
    v["the move comes before the get/drop"] = _share(move_first)


def _qa3(stories: list[Story], v: dict) -> None:
    last_pair, ambiguous, event_drop, after, get_after_drop = [], [], [], [], []
    for s in stories:
        for q, last, spell in _spells(s):
            o, room = re.fullmatch(r"Where was the (\w+) before the (\w+)\?", q.text).groups()
            moves = spell.get(o, [])
            pairs = [(a.line, b.line) for a, b in zip(moves, moves[1:])]
            sup = set(q.support)
            last_pair.append(bool(pairs) and set(pairs[-1]) <= sup)
            ambiguous.append(sum(b.args[1] == room for b in moves[1:]) > 1)
            event_drop.append(last[o].kind == "drop")
            after.append(last[o].line in sup)
            ev = last[o]
            drops = [x for x in s.stmts[: ev.pos - 1] if x.kind == "drop" and x.args[1] == o]
            get_after_drop.append(ev.kind == "get" and bool(drops) and ev.pos - drops[-1].pos <= 2)
    v["gold event is the object's latest get/drop"] = _share(after)
    v["gold event is a drop"] = _share(event_drop)
    v["move pair is the spell's last"] = _share(last_pair)
    v["asked room occurs twice in the spell"] = _share(ambiguous)
    # the decoy that wins in the error analysis (experiments/round5/generator_analysis.md): a drop
    # of the asked object 1-2 statements before the gold pick-up
    v["gold pick-up at most 2 after a drop of its object"] = _share(get_after_drop)
    _carrying(stories, v)


def _carrying(stories: list[Story], v: dict) -> None:
    """How many objects are held at once, and how events follow each other (qa3): in the real
    files an event is the likelier the more events of its kind are possible."""
    all_held, event_next = [], []
    for s in stories:
        held: set[str] = set()
        for prev, x in zip([None, *s.stmts], s.stmts):
            all_held.append(len(held) == 3)  # before the statement
            if prev is not None and prev.kind in ("get", "drop"):
                event_next.append(x.kind in ("get", "drop") and x.args[0] != prev.args[0])
            if x.kind == "get":
                held.add(x.args[1])
            elif x.kind == "drop":
                held.discard(x.args[1])
    v["statements while all three objects are held"] = _share(all_held)
    v["a get/drop is followed by someone else's"] = _share(event_next)


def _qa4(stories: list[Story], v: dict) -> None:
    line_up, word_elsewhere, names_middle = [], [], []
    for s in stories:
        pos = {s.stmts[0].args[2]: (0, 0)}
        for x in s.stmts:  # place the rooms on a grid from the relations
            a, d, b = x.args
            dx, dy = _STEP[d]
            if b in pos:
                pos[a] = (pos[b][0] + dx, pos[b][1] + dy)
            else:
                pos[b] = (pos[a][0] - dx, pos[a][1] - dy)
        xs, ys = {p[0] for p in pos.values()}, {p[1] for p in pos.values()}
        line_up.append(len(xs) == 1 or len(ys) == 1)
        middle = ({s.stmts[0].args[0], s.stmts[0].args[2]} & {s.stmts[1].args[0], s.stmts[1].args[2]}).pop()
        for q in s.questions:
            d = next(w for w in DIRECTIONS if w in q.text.split())
            other = [x for x in s.stmts if x.line not in q.support]
            word_elsewhere.append(any(x.args[1] == d for x in other))
            names_middle.append(middle in re.findall(r"\w+", q.text))
    v["the three rooms lie on one line"] = _share(line_up)
    v["the question names the middle room"] = _share(names_middle)
    v["question's direction word in the non-gold statement"] = _share(word_elsewhere)


def _qa5(stories: list[Story], v: dict) -> None:
    reask = []
    for s in stories:
        reask += [a.support == b.support for a, b in zip(s.questions, s.questions[1:])]
    v["asks about the same hand-over as the previous question"] = _share(reask)


TASK_STATS = {"qa1": _qa1, "qa2": _qa2, "qa3": _qa3, "qa4": _qa4, "qa5": _qa5}


# ---- what the report compares, and how closely --------------------------------------------------
@dataclass(frozen=True)
class Check:
    name: str
    tol: float  # |generated - real| allowed (relative for names in RELATIVE); see compare()
    kind: str = "value"  # "value", "table" (total-variation distance) or "new" (words real never uses)


def _common(mix: tuple[str, ...], gold: int, per_story: bool = True) -> list[Check]:
    return [
        Check("vocabulary", 0, kind="new"),
        Check("questions with a space before the tab", 0.0),
        Check("questions per story", 0.05),
        Check("statements per story", 0.15),
        Check("statements before a question", 0.15),
        *([Check("statements between questions", 0.15), Check("90th percentile gap", 0.25)] if per_story else []),
        *[Check(f"share of {k} statements", 0.03) for k in mix],
        Check("question forms", 0.05, kind="table"),
        Check("answers", 0.08, kind="table"),
        *([Check("question repeats the previous one", 0.05)] if per_story else []),
        Check("supporting facts per question", 0.0),
        Check("gold-fact kinds in listed order", 0.05, kind="table"),
        *[Check(f"distance of gold fact {j + 1} (mean)", 0.2) for j in range(gold)],
        Check("distance of the latest gold fact (mean)", 0.2),
        Check("latest gold fact at most 5 back", 0.03),
        Check("distance of the earliest gold fact (90th pct)", 0.25),
    ]


RELATIVE = {
    "distance of the latest gold fact (mean)",
    "statements per story",
    "statements before a question",
    "statements between questions",
    "90th percentile gap",
    "distance of the earliest gold fact (90th pct)",
} | {f"distance of gold fact {j} (mean)" for j in (1, 2, 3)}

STATS: dict[str, list[Check]] = {
    "qa1": [*_common(("move",), 1), Check("asks about the person who moved last", 0.05)],
    "qa2": [
        *_common(("move", "get", "drop"), 2),
        Check("share of gaps of 2 statements", 0.05),
        Check("a drop is followed by a get", 0.04),
        Check("gets ending in 'there'", 0.03),
        Check("drops ending in 'there'", 0.03),
        Check("asks about a dropped object", 0.04),
        Check("the move comes before the get/drop", 0.04),
    ],
    "qa3": [
        *_common(("move", "get", "drop"), 3),
        Check("share of gaps of 2 statements", 0.05),
        Check("a drop is followed by a get", 0.04),
        Check("gets ending in 'there'", 0.03),
        Check("drops ending in 'there'", 0.03),
        Check("gold event is the object's latest get/drop", 0.0),
        Check("gold event is a drop", 0.04),
        Check("move pair is the spell's last", 0.05),
        Check("asked room occurs twice in the spell", 0.04),
        Check("gold pick-up at most 2 after a drop of its object", 0.02),
        Check("statements while all three objects are held", 0.02),
        Check("a get/drop is followed by someone else's", 0.03),
    ],
    "qa4": [
        *_common(("rel",), 1, per_story=False),
        Check("the three rooms lie on one line", 0.03),
        Check("the question names the middle room", 0.04),
        Check("question's direction word in the non-gold statement", 0.04),
    ],
    "qa5": [
        *_common(("move", "get", "drop", "give"), 1),
        Check("share of gaps of 2 statements", 0.05),
        Check("a give is followed by a give", 0.04),
        Check("gets ending in 'there'", 0.03),
        Check("drops ending in 'there'", 0.03),
        Check("asks about the same hand-over as the previous question", 0.05),
    ],
}


@dataclass
class Row:
    name: str
    real: float
    generated: float
    tol: str  # as shown in the table
    ok: bool


def compare(task: str, real: FileStats, gen: FileStats) -> list[Row]:
    """One row per statistic of ``STATS[task]``: real and generated value, tolerance, pass."""
    rows = []
    for c in STATS[task]:
        if c.kind == "table":
            d = _tv(real.tables[c.name], gen.tables[c.name])
            rows.append(Row(f"{c.name} (TV distance)", float("nan"), d, f"≤ {c.tol:g}", d <= c.tol + 1e-12))
            continue
        if c.kind == "new":
            new = len(set(gen.tables[c.name]) - set(real.tables[c.name]))
            rows.append(Row("words the real file never uses", float("nan"), new, f"≤ {c.tol:g}", new <= c.tol))
            continue
        r, g = real.values[c.name], gen.values[c.name]
        if c.name in RELATIVE:
            rows.append(Row(c.name, r, g, f"± {c.tol:.0%}", abs(g - r) <= c.tol * abs(r) + 1e-12))
        else:
            rows.append(Row(c.name, r, g, f"± {c.tol:g}", abs(g - r) <= c.tol + 1e-12))
    return rows
