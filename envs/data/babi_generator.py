"""Deterministic generator for bAbI tasks qa1-qa5 in the bAbI v1.2 file format, and a checker.

The output is *generated* data that follows rules measured on the real bAbI v1.2 en-10k files
(docs/DATA_BABILONG.md; experiments/babi_fidelity/babi_fidelity.py puts both side by side). It is not the real
bAbI data and not BabiLong.

Shared by the world tasks (qa1, qa2, qa3, qa5), as measured on the real files:

* everyone and everything starts in a hidden room, so a story may open with a pick-up;
* a statement is a move to another room or one of the possible pick-ups / drops / hand-overs,
  drawn by the task's ``ACTIONS`` weights (qa1, qa2, qa5), so a drop is often followed by a
  pick-up and a hand-over by a hand-back, as in the real files; in qa3 by ``KIND_WEIGHTS`` and
  ``TRIES`` instead, so that an event is the likelier the more events of its kind are possible;
* statements come in pairs, and after each pair a question is asked whenever one is askable,
  which makes repeated questions common; every story holds 5 questions;
* pick-ups end in "there" always in qa2 and qa5 and 20 % of the time in qa3; drops 20 %.

:func:`check_babi_lines` re-derives every answer and supporting set from the story *text* with
its own simulation (it also accepts the real files), so generator bugs cannot hide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from envs.seeding import derive_rng

GEN_TASKS: dict[str, str] = {
    "qa1": "qa1_single-supporting-fact",
    "qa2": "qa2_two-supporting-facts",
    "qa3": "qa3_three-supporting-facts",
    "qa4": "qa4_two-arg-relations",
    "qa5": "qa5_three-arg-relations",
}
PEOPLE = ("Mary", "John", "Daniel", "Sandra")
PEOPLE_QA5 = ("Bill", "Fred", "Jeff", "Mary")
PLACES = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")
OBJECTS = ("apple", "football", "milk")
MOVE_VERBS = ("moved to", "went to", "journeyed to", "travelled to", "went back to")
GET_VERBS = ("got", "grabbed", "picked up", "took")
DROP_VERBS = ("dropped", "discarded", "put down", "left")
GIVE_VERBS = ("gave", "handed", "passed")
DIRECTIONS = ("north", "south", "east", "west")
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}

QUESTIONS_PER_STORY = 5
WINDOW = 5  # a question's newest supporting fact lies at most this many statements back
# How often each group of actions is drawn when one of its actions is possible (fitted on the real
# files' statement mix; in qa5 also on how often a hand-over follows when one is possible).
ACTIONS = {
    "qa1": {"move": 1.0},
    "qa2": {"move": 0.64, "get drop": 0.36},
    "qa5": {"move": 1.0, "get drop": 0.6, "give": 1.25},
}
# qa3: a kind is drawn by KIND_WEIGHTS, then up to TRIES random (person, room or object) proposals of
# it are tried and the first possible one is done; if none is, the kind is drawn again. In the real
# qa3 files the chance of a drop grows with the number of objects held (and of a pick-up with the
# objects lying where someone is), which a fixed move : event weight does not give: with it, all
# three objects were held at once half as often as in the real files (fitted on the real files:
# experiments/round5/generator_analysis.md).
KIND_WEIGHTS = {"qa3": {"move": 1.0, "get": 0.7, "drop": 0.62}}
TRIES = 8
THERE_GET = {"qa2": 1.0, "qa3": 0.2, "qa5": 1.0}
THERE_DROP = 0.2
# qa3: the asked move pair is the carrying spell's last with weight 1, the one before with
# PAIR_DECAY, the one before that PAIR_DECAY**2, ... (fitted on the real spells of 3-9 moves).
PAIR_DECAY = 0.63
# qa4: each of the two relations names the middle room as its second room with this chance.
MIDDLE_SECOND = 2 / 3


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


@dataclass
class _Stmt:
    line: int  # story line number
    pos: int  # 1-based index among the story's statements
    kind: str  # "move", "get", "drop" or "give"
    who: str
    what: str  # place (move) or object
    to: str = ""  # receiver (give)


class _World:
    """The true state of one story: everyone and everything is somewhere from the start."""

    def __init__(self, rng: np.random.Generator, people: tuple[str, ...]):
        self.rng, self.people = rng, people
        self.at = {p: _pick(rng, PLACES) for p in people}
        self.lying = {o: _pick(rng, PLACES) for o in OBJECTS}  # object -> room, when not held
        self.holder: dict[str, str] = {}

    def options(self, kinds: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
        """Every possible (kind, person, object, receiver) action of ``kinds``."""
        out = []
        for kind in kinds:
            for p in self.people:
                for o in OBJECTS:
                    if kind == "get" and self.lying.get(o) == self.at[p]:
                        out.append((kind, p, o, ""))
                    elif kind == "drop" and self.holder.get(o) == p:
                        out.append((kind, p, o, ""))
                    elif kind == "give" and self.holder.get(o) == p:
                        out += [(kind, p, o, q) for q in self.people if q != p and self.at[q] == self.at[p]]
        return out

    def step(self, weights: dict[str, float]) -> tuple[str, str, str, str]:
        """Draw one action and do it. ``weights`` weighs "move" against groups of other kinds
        (e.g. ``{"move": 0.63, "get drop": 0.37}``); a group with no possible action drops out, and
        within the drawn group every possible action is equally likely."""
        rng = self.rng
        groups = {g: opts for g in weights if g != "move" and (opts := self.options(tuple(g.split())))}
        chosen = "move"
        if groups:
            names = ["move", *groups]
            r = rng.random() * sum(weights[g] for g in names)
            for chosen in names:  # the first group whose cumulative weight exceeds r
                r -= weights[chosen]
                if r < 0:
                    break
        if chosen == "move":
            p = _pick(rng, self.people)
            act = ("move", p, _pick(rng, [x for x in PLACES if x != self.at[p]]), "")
        else:
            act = groups[chosen][int(rng.integers(len(groups[chosen])))]
        kind, p, x, q = act
        if kind == "move":
            self.at[p] = x
        elif kind == "get":
            del self.lying[x]
            self.holder[x] = p
        elif kind == "drop":
            del self.holder[x]
            self.lying[x] = self.at[p]
        else:
            self.holder[x] = q
        return act

    def propose(self, weights: dict[str, float], tries: int) -> tuple[str, str, str, str]:
        """Draw a kind ("move", "get" or "drop") by ``weights``, try ``tries`` random proposals of
        it and do the first possible one; draw the kind again when none is (see ``KIND_WEIGHTS``)."""
        rng, kinds = self.rng, list(weights)
        w = np.array([weights[k] for k in kinds])
        while True:
            kind = kinds[int(rng.choice(len(kinds), p=w / w.sum()))]
            for _ in range(tries):
                p = _pick(rng, self.people)
                if kind == "move":
                    x = _pick(rng, PLACES)
                    if x != self.at[p]:
                        self.at[p] = x
                        return ("move", p, x, "")
                    continue
                o = _pick(rng, OBJECTS)
                if kind == "get" and self.lying.get(o) == self.at[p]:
                    del self.lying[o]
                    self.holder[o] = p
                    return ("get", p, o, "")
                if kind == "drop" and self.holder.get(o) == p:
                    del self.holder[o]
                    self.lying[o] = self.at[p]
                    return ("drop", p, o, "")


class _Story:
    """Lines of one story being written, and the statements behind them."""

    def __init__(self, task: str, rng: np.random.Generator, people: tuple[str, ...] = PEOPLE):
        self.task, self.rng = task, rng
        self.world = _World(rng, people)
        self.lines: list[str] = []
        self.stmts: list[_Stmt] = []
        self.asked = 0

    def act(self) -> _Stmt:
        if self.task in KIND_WEIGHTS:
            kind, p, x, q = self.world.propose(KIND_WEIGHTS[self.task], TRIES)
        else:
            kind, p, x, q = self.world.step(ACTIONS[self.task])
        rng = self.rng
        if kind == "move":
            text = f"{p} {_pick(rng, MOVE_VERBS)} the {x}."
        elif kind == "give":
            text = f"{p} {_pick(rng, GIVE_VERBS)} the {x} to {q}."
        else:
            verbs, rate = (GET_VERBS, THERE_GET[self.task]) if kind == "get" else (DROP_VERBS, THERE_DROP)
            text = f"{p} {_pick(rng, verbs)} the {x}{' there' if rng.random() < rate else ''}."
        self.lines.append(f"{len(self.lines) + 1} {text}")
        st = _Stmt(len(self.lines), len(self.stmts) + 1, kind, p, x, q)
        self.stmts.append(st)
        return st

    def recent(self, st: _Stmt) -> bool:
        return len(self.stmts) - st.pos < WINDOW

    def ask(self, question: str, answer: str, support: list[_Stmt]) -> None:
        sup = " ".join(str(s.line) for s in support)
        self.lines.append(f"{len(self.lines) + 1} {question} \t{answer}\t{sup}")
        self.asked += 1


# ---- one function per task: a story with ``n`` questions ------------------------------------------
def _qa1_story(rng: np.random.Generator, n: int) -> list[str]:
    """Two moves, then "Where is P?" about the mover of a random one of the last 5 statements."""
    s = _Story("qa1", rng)
    while s.asked < n:
        for _ in range(2):
            s.act()
        p = _pick(rng, s.stmts[-WINDOW:]).who
        last = [x for x in s.stmts if x.who == p][-1]
        s.ask(f"Where is {p}?", last.what, [last])
    return s.lines


def _qa2_story(rng: np.random.Generator, n: int) -> list[str]:
    """ "Where is the O?" about a random object whose latest pick-up or drop is recent: a dropped
    one (gold: drop, dropper's move before it) or a carried one whose carrier has moved since
    (gold: pick-up, that move)."""
    s = _Story("qa2", rng)
    last: dict[str, tuple[_Stmt, _Stmt | None]] = {}  # object -> (get/drop, carrier's latest move)
    moved: dict[str, _Stmt] = {}
    while s.asked < n:
        for _ in range(2):
            st = s.act()
            if st.kind == "move":
                moved[st.who] = st
                for o, (ev, _) in last.items():
                    if ev.kind == "get" and ev.who == st.who:
                        last[o] = (ev, st)
            else:
                last[st.what] = (st, moved.get(st.who) if st.kind == "drop" else None)
        askable = [o for o, (ev, mv) in sorted(last.items()) if mv is not None and s.recent(ev)]
        if askable:
            o = _pick(rng, askable)
            ev, mv = last[o]
            s.ask(f"Where is the {o}?", mv.what, [ev, mv])
    return s.lines


def _qa3_story(rng: np.random.Generator, n: int) -> list[str]:
    """ "Where was the O before the R?" about a random object whose latest pick-up or drop is recent
    and whose carrier moved twice or more in that carrying spell; gold: that pick-up or drop, then
    the move into R, then the move before it (a pair of the spell, see PAIR_DECAY)."""
    s = _Story("qa3", rng)
    last: dict[str, _Stmt] = {}  # object -> its latest get/drop
    spells: dict[str, list[_Stmt]] = {}  # object -> its carrier's moves since the get
    while s.asked < n:
        for _ in range(2):
            st = s.act()
            if st.kind == "move":
                for o, h in s.world.holder.items():
                    if h == st.who:
                        spells[o].append(st)
            else:
                last[st.what] = st
                if st.kind == "get":
                    spells[st.what] = []
        askable = [o for o, ev in sorted(last.items()) if s.recent(ev) and len(spells[o]) >= 2]
        if askable:
            o = _pick(rng, askable)
            pairs = list(zip(spells[o], spells[o][1:]))
            w = PAIR_DECAY ** np.arange(len(pairs))[::-1]
            m1, m2 = pairs[int(rng.choice(len(pairs), p=w / w.sum()))]
            s.ask(f"Where was the {o} before the {m2.what}?", m1.what, [last[o], m2, m1])
    return s.lines


def _qa4_story(rng: np.random.Generator) -> list[str]:
    """Three rooms on one north-south or east-west line, two relations each naming the middle
    room, in random order; the question is about one relation, in one of two wordings."""
    rooms = [str(x) for x in rng.choice(PLACES, 3, replace=False)]  # in the line's order
    step = _pick(rng, ("north", "east"))  # rooms[i + 1] is `step` of rooms[i]
    rels = []  # (x, d, y): "The x is d of the y."
    for other, d in ((rooms[0], OPPOSITE[step]), (rooms[2], step)):  # other is d of the middle
        if rng.random() < MIDDLE_SECOND:
            rels.append((other, d, rooms[1]))
        else:
            rels.append((rooms[1], OPPOSITE[d], other))
    if rng.random() < 0.5:
        rels.reverse()
    k = int(rng.integers(2))
    x, d, y = rels[k]
    q = f"What is {d} of the {y}?" if rng.random() < 0.5 else f"What is the {y} {OPPOSITE[d]} of?"
    lines = [f"{i + 1} The {a} is {b} of the {c}." for i, (a, b, c) in enumerate(rels)]
    return [*lines, f"3 {q}\t{x}\t{k + 1}"]  # qa4 has no space before the tab


def _qa5_story(rng: np.random.Generator, n: int) -> list[str]:
    """A question about the latest hand-over whenever it is recent: what was given, who gave it
    (with or without the receiver) or who received it (two wordings), the object 1/3 of the time."""
    s = _Story("qa5", rng, PEOPLE_QA5)
    give: _Stmt | None = None
    while s.asked < n:
        for _ in range(2):
            st = s.act()
            give = st if st.kind == "give" else give
        if give is not None and s.recent(give):
            p, o, q = give.who, give.what, give.to
            asked = _pick(rng, ("object", "giver", "receiver"))
            if asked == "object":
                s.ask(f"What did {p} give to {q}?", o, [give])
            elif asked == "giver":
                s.ask(_pick(rng, (f"Who gave the {o} to {q}?", f"Who gave the {o}?")), p, [give])
            else:
                s.ask(_pick(rng, (f"Who received the {o}?", f"Who did {p} give the {o} to?")), q, [give])
    return s.lines


_STORY = {"qa1": _qa1_story, "qa2": _qa2_story, "qa3": _qa3_story, "qa5": _qa5_story}


def generate_task(task: str, n_questions: int, seed: int, split: str = "train") -> list[str]:
    """Lines (without newlines) of a bAbI file for ``task`` (short key) with ``n_questions``."""
    if task not in GEN_TASKS:
        raise ValueError(f"the generator covers {sorted(GEN_TASKS)}, not {task!r}")
    rng = derive_rng(seed, "babi-generator", task, split)
    out: list[str] = []
    total = 0
    while total < n_questions:
        if task == "qa4":
            out.extend(_qa4_story(rng))
            total += 1
            continue
        want = min(QUESTIONS_PER_STORY, n_questions - total)
        out.extend(_STORY[task](rng, want))
        total += want
    return out


# ---- checker: an independent simulation from the story text ---------------------------------
_P = r"([A-Z][a-z]+)"
_RX_MOVE = re.compile(rf"^{_P} (?:moved|went|journeyed|travelled|went back) to the (\w+)\.$")
_RX_GET = re.compile(rf"^{_P} (?:got|grabbed|picked up|took) the (\w+)(?: there)?\.$")
_RX_DROP = re.compile(rf"^{_P} (?:dropped|discarded|put down|left) the (\w+)(?: there)?\.$")
_RX_GIVE = re.compile(rf"^{_P} (?:gave|handed|passed) the (\w+) to {_P}\.$")
_RX_REL = re.compile(r"^The (\w+) is (north|south|east|west) of the (\w+)\.$")


def _answer(task: str, q: str, st: dict) -> tuple[str, set[int]] | set:
    """Answer and supporting lines for question ``q`` given the checker state ``st``; where several
    readings are right (qa3), the set of (answer, frozenset(support)) pairs."""
    if m := re.fullmatch(r"Where is (\w+)\?", q):
        p = m.group(1)
        assert p in st["at"], f"{p}'s room was never stated"
        return st["at"][p][0], {st["at"][p][1]}
    if m := re.fullmatch(r"Where is the (\w+)\?", q):
        o = m.group(1)
        if o in st["carrier"]:
            p, pl = st["carrier"][o]
            assert p in st["at"], f"the {o}'s carrier {p} has no stated room"
            place, ml = st["at"][p]
            return place, {pl, ml}
        assert o in st["dropped"], f"the {o} was never dropped or picked up"
        place, dl, ml = st["dropped"][o]
        assert place is not None, f"the {o} was dropped in an unstated room"
        return place, {dl, ml}
    if m := re.fullmatch(r"Where was the (\w+) before the (\w+)\?", q):
        # any two consecutive moves of the carrier in the object's latest carrying spell that end
        # in the asked room, with the spell's last pick-up or drop (a room may recur in a spell)
        o, now = m.groups()
        assert o in st["last_event"], f"nothing happened to the {o}"
        event, moves = st["last_event"][o], st["spell"][o]
        return {(a[0], frozenset({event, a[1], b[1]})) for a, b in zip(moves, moves[1:]) if b[0] == now}
    if m := re.fullmatch(r"What is (\w+) of the (\w+)\?", q):
        d, y = m.groups()
        hits = [(x, ln) for (x, dd, yy, ln) in st["rels"] if dd == d and yy == y]
    elif m := re.fullmatch(r"What is the (\w+) (\w+) of\?", q):
        x, d = m.groups()
        hits = [(yy, ln) for (xx, dd, yy, ln) in st["rels"] if dd == d and xx == x]
    else:
        hits = None
    if hits is not None:
        if len({h[0] for h in hits}) != 1:
            raise AssertionError(f"relation question {q!r} has answers {hits}")
        return hits[0][0], {h[1] for h in hits}
    gives = st["gives"]  # (giver, obj, receiver, line), most recent last
    forms = [
        (r"What did (\w+) give to (\w+)\?", lambda g, a, b: g[0] == a and g[2] == b, 1),
        (r"Who gave the (\w+) to (\w+)\?", lambda g, a, b: g[1] == a and g[2] == b, 0),
        (r"Who received the (\w+)\?", lambda g, a: g[1] == a, 2),
        (r"Who did (\w+) give the (\w+) to\?", lambda g, a, b: g[0] == a and g[1] == b, 2),
        (r"Who gave the (\w+)\?", lambda g, a: g[1] == a, 0),
    ]
    for rx, pred, slot in forms:
        if m := re.fullmatch(rx, q):
            match = [g for g in gives if pred(g, *m.groups())]
            assert match, f"no hand-over fits {q!r}"
            return match[-1][slot], {match[-1][3]}
    raise AssertionError(f"unknown question form {q!r}")


def check_babi_lines(task: str, lines: list[str]) -> int:
    """Re-derive every answer and supporting set of a qa1-qa5 file; return #questions.

    Raises AssertionError naming the line on the first disagreement, or on a statement that
    breaks the world's rules (picking up an object lying in another stated room, dropping or
    handing over one not held, handing over to someone stated to be in another room, moving to
    the room one is in).
    """
    count = 0
    st: dict = {}
    for ln, line in enumerate(lines, start=1):
        head, _, text = line.partition(" ")
        n = int(head)
        if n == 1:
            st = {"at": {}, "carrier": {}, "dropped": {}, "rels": [], "gives": [], "last_event": {}, "spell": {}}
        try:
            if "\t" in text:
                q, ans, sup = text.split("\t")
                assert q.endswith("?" if task == "qa4" else "? "), "qa4 questions end in '?', others in '? '"
                got_sup = {int(s) for s in sup.split()}
                want = _answer(task, q.strip(), st)
                if isinstance(want, set):
                    assert (ans, frozenset(got_sup)) in want, f"answer {ans!r} {sorted(got_sup)}, simulation {want}"
                else:
                    assert ans == want[0], f"answer {ans!r}, simulation says {want[0]!r}"
                    assert got_sup == want[1], f"support {sorted(got_sup)}, simulation {sorted(want[1])}"
                count += 1
                continue
            _apply(st, text, n)
        except AssertionError as e:
            raise AssertionError(f"{task} line {ln} ({line!r}): {e}") from None
    return count


def _apply(st: dict, text: str, n: int) -> None:
    """Update the checker state with one statement (rooms not yet stated are None)."""
    if m := _RX_MOVE.match(text):
        p, place = m.groups()
        assert place in PLACES
        before = st["at"].get(p)
        assert before is None or before[0] != place, "moves always change place"
        st["at"][p] = (place, n)
        for o, (c, _) in st["carrier"].items():
            if c == p:
                st["spell"][o].append((place, n))
    elif m := _RX_GET.match(text):
        p, o = m.groups()
        assert o not in st["carrier"], f"{o} is already carried"
        here = st["at"].get(p, (None,))[0]
        if o in st["dropped"]:
            there = st["dropped"].pop(o)[0]
            assert None in (here, there) or there == here, f"{o} lies elsewhere"
        st["carrier"][o] = (p, n)
        st["last_event"][o], st["spell"][o] = n, []
    elif m := _RX_DROP.match(text):
        p, o = m.groups()
        assert st["carrier"].get(o, ("",))[0] == p, f"{p} drops {o} without holding it"
        del st["carrier"][o]
        place, move_line = st["at"].get(p, (None, None))
        st["dropped"][o] = (place, n, move_line)
        st["last_event"][o] = n
    elif m := _RX_GIVE.match(text):
        p, o, q = m.groups()
        assert st["carrier"].get(o, ("",))[0] == p, f"{p} gives {o} without holding it"
        a, b = st["at"].get(p, (None,))[0], st["at"].get(q, (None,))[0]
        assert None in (a, b) or a == b, f"{q} is not where {p} is"
        st["carrier"][o] = (q, n)
        st["gives"].append((p, o, q, n))
    elif m := _RX_REL.match(text):
        x, d, y = m.groups()
        st["rels"] += [(x, d, y, n), (y, OPPOSITE[d], x, n)]
    else:
        raise AssertionError(f"unknown statement {text!r}")
