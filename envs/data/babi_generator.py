"""Deterministic generator for bAbI tasks qa1-qa5 in the bAbI v1.2 file format, and a checker.

The generator simulates a small world (people move between rooms, pick up, drop and hand over
objects) and writes stories with interleaved questions whose supporting facts are exactly what
a reader needs (DESIGN §7.1 format). :func:`check_babi_lines` re-derives every answer and supporting
set from the story *text* with its own simulation, so generator bugs cannot hide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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

# Questions per story and statements between questions, chosen to resemble en-10k.
QUESTIONS_PER_STORY = {"qa1": 5, "qa2": 5, "qa3": 5, "qa4": 1, "qa5": 5}
GAP = {"qa1": (2, 2), "qa2": (1, 8), "qa3": (2, 24), "qa5": (1, 6)}


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


@dataclass
class _World:
    """Generator-side state. Lines are story line numbers (1-based)."""

    loc: dict[str, str] = field(default_factory=dict)  # person -> place
    loc_line: dict[str, int] = field(default_factory=dict)  # person -> line of last move
    holder: dict[str, str] = field(default_factory=dict)  # object -> person
    pick_line: dict[str, int] = field(default_factory=dict)  # object -> line of current pick-up
    lying: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # obj -> (place, drop, move)
    # object -> (place before last move, line placing holder there, pick-up line, move line)
    last_transition: dict[str, tuple[str, int, int, int]] = field(default_factory=dict)
    last_give: tuple[str, str, str, int] | None = None  # (giver, object, receiver, line)


class _StoryWriter:
    def __init__(self, task: str, rng: np.random.Generator):
        self.task, self.rng = task, rng
        self.people = PEOPLE_QA5 if task == "qa5" else PEOPLE
        self.lines: list[str] = []
        self.w = _World()
        self.n_questions = 0

    @property
    def n(self) -> int:
        return len(self.lines) + 1

    def say(self, text: str) -> int:
        self.lines.append(f"{self.n} {text}")
        return len(self.lines)

    def ask(self, question: str, answer: str, support: list[int]) -> None:
        self.say(f"{question} \t{answer}\t{' '.join(str(s) for s in support)}")
        self.n_questions += 1

    # ---- world actions ------------------------------------------------------------------
    def move(self) -> None:
        rng, w = self.rng, self.w
        p = _pick(rng, self.people)
        dest = _pick(rng, [x for x in PLACES if x != w.loc.get(p)])
        line = self.say(f"{p} {_pick(rng, MOVE_VERBS)} the {dest}.")
        for o, h in w.holder.items():
            if h == p and p in w.loc:
                w.last_transition[o] = (w.loc[p], w.loc_line[p], w.pick_line[o], line)
        w.loc[p], w.loc_line[p] = dest, line

    def can_pick(self) -> list[tuple[str, str]]:
        w = self.w
        out = []
        for p in self.people:
            if p not in w.loc:
                continue
            for o in OBJECTS:
                if o in w.holder:
                    continue
                if o not in w.lying or w.lying[o][0] == w.loc[p]:
                    out.append((p, o))
        return out

    def pick(self) -> bool:
        opts = self.can_pick()
        if not opts:
            return False
        p, o = _pick(self.rng, opts)
        line = self.say(f"{p} {_pick(self.rng, GET_VERBS)} the {o} there.")
        self.w.holder[o], self.w.pick_line[o] = p, line
        self.w.lying.pop(o, None)
        return True

    def drop(self) -> bool:
        w = self.w
        held = sorted(w.holder)
        if not held:
            return False
        o = _pick(self.rng, held)
        p = w.holder.pop(o)
        line = self.say(f"{p} {_pick(self.rng, DROP_VERBS)} the {o}.")
        w.lying[o] = (w.loc[p], line, w.loc_line[p])
        return True

    def give(self) -> bool:
        w = self.w
        opts = [
            (o, p, q) for o, p in sorted(w.holder.items()) for q in self.people if q != p and w.loc.get(q) == w.loc[p]
        ]
        if not opts:
            return False
        o, p, q = _pick(self.rng, opts)
        line = self.say(f"{p} {_pick(self.rng, GIVE_VERBS)} the {o} to {q}.")
        w.holder[o], w.pick_line[o] = q, line
        w.last_give = (p, o, q, line)
        return True

    def act(self) -> None:
        """One random statement; movement dominates, as in the real files."""
        if self.task == "qa1":
            self.move()
            return
        r = self.rng.random()
        if self.task == "qa5":
            done = (r < 0.35 and self.give()) or (r < 0.6 and self.pick()) or (r < 0.7 and self.drop())
        else:
            done = (r < 0.2 and self.pick()) or (r < 0.3 and self.drop())
        if not done:
            self.move()

    # ---- questions ----------------------------------------------------------------------
    def question(self) -> bool:
        """Ask one question if the world allows it; False if none is answerable yet."""
        rng, w = self.rng, self.w
        if self.task == "qa1":
            who = [p for p in self.people if p in w.loc]
            if not who:
                return False
            # Prefer someone who just moved (as the real files do), else anyone known.
            recent = [p for p in who if w.loc_line[p] >= len(self.lines) - 1]
            p = _pick(rng, recent if recent and rng.random() < 0.7 else who)
            self.ask(f"Where is {p}?", w.loc[p], [w.loc_line[p]])
            return True
        if self.task == "qa2":
            opts = sorted(set(w.holder) | set(w.lying))
            if not opts:
                return False
            o = _pick(rng, opts)
            if o in w.holder:
                p = w.holder[o]
                self.ask(f"Where is the {o}?", w.loc[p], [w.loc_line[p], w.pick_line[o]])
            else:
                place, drop_line, move_line = w.lying[o]
                self.ask(f"Where is the {o}?", place, [drop_line, move_line])
            return True
        if self.task == "qa3":
            opts = sorted(w.last_transition)
            if not opts:
                return False
            o = _pick(rng, opts)
            before, before_line, pick_line, move_line = w.last_transition[o]
            now = self._place_of(o)
            self.ask(f"Where was the {o} before the {now}?", before, [move_line, before_line, pick_line])
            return True
        if self.task == "qa5":
            if w.last_give is None:
                return False
            p, o, q, line = w.last_give
            form = int(rng.integers(5))
            qa = [
                (f"What did {p} give to {q}?", o),
                (f"Who gave the {o} to {q}?", p),
                (f"Who received the {o}?", q),
                (f"Who did {p} give the {o} to?", q),
                (f"Who gave the {o}?", p),
            ][form]
            self.ask(qa[0], qa[1], [line])
            w.last_give = None  # the next question waits for a new hand-over
            return True
        raise ValueError(self.task)

    def _place_of(self, o: str) -> str:
        w = self.w
        return w.loc[w.holder[o]] if o in w.holder else w.lying[o][0]


def _qa4_story(rng: np.random.Generator) -> list[str]:
    """Two relations sharing one place, then one question answered by one of them."""
    a, mid, b = (str(x) for x in rng.choice(PLACES, 3, replace=False))
    d1 = _pick(rng, DIRECTIONS)
    d2 = _pick(rng, [d for d in DIRECTIONS if d != d1])  # a and b lie in different directions
    rels = [(a, d1, mid), (b, d2, mid)]  # (x, d, y): x is d of y
    lines = []
    for x, d, y in rels:
        if rng.random() < 0.5:  # state it from either side
            x, d, y = y, OPPOSITE[d], x
        lines.append(f"The {x} is {d} of the {y}.")
    k = int(rng.integers(2))
    x, d, y = rels[k]
    if rng.random() < 0.5:
        q, ans = f"What is {d} of the {y}?", x
    else:
        q, ans = f"What is the {x} {d} of?", y
    return [f"1 {lines[0]}", f"2 {lines[1]}", f"3 {q} \t{ans}\t{k + 1}"]


# ---- qa3, following the real en-10k files -----------------------------------------------------
# Rules measured on the real qa3 files (scripts/babi_fidelity.py prints them side by side):
# * everyone and everything starts in a hidden room (first pick-ups may come before any move);
# * a statement is a move (to another room) with probability MOVE_RATE, else one of the possible
#   pick-ups and drops, uniformly (so a drop is often followed by a pick-up, as in the real files);
# * statements come in pairs; after each pair a question is asked whenever one is askable;
# * askable: an object whose latest pick-up or drop lies at most WINDOW statements back and whose
#   carrier moved at least twice in that carrying spell (after the pick-up, before the drop);
# * the question names the room of one move of the spell and asks for the room of the move before
#   it; the pair is the spell's last one with weight 1, the one before with PAIR_DECAY, and so on;
# * gold = that pick-up or drop + the two moves, listed as "event, later move, earlier move";
# * 20 % of pick-ups and drops end in "there"; 5 questions per story.
THERE_RATE = 0.2
MOVE_RATE = 0.63
WINDOW = 5
PAIR_DECAY = 0.63


@dataclass
class _Stmt:
    line: int  # story line number
    kind: str  # "move", "get" or "drop"
    who: str
    what: str  # place (move) or object (get, drop)


class _HiddenWorld:
    """The true state: everyone and everything is somewhere from the start, stated or not."""

    def __init__(self, rng: np.random.Generator, people: tuple[str, ...]):
        self.rng, self.people = rng, people
        self.at = {p: _pick(rng, PLACES) for p in people}
        self.lying = {o: _pick(rng, PLACES) for o in OBJECTS}  # object -> room, when not held
        self.holder: dict[str, str] = {}

    def sample(self, kinds: tuple[str, ...], move_rate: float) -> tuple[str, str, str]:
        """One action: a move with probability ``move_rate`` (or when nothing else is possible),
        else one of the possible (person, kind, object) actions of ``kinds``, uniformly."""
        rng = self.rng
        options = [(k, p, o) for k in kinds for p in self.people for o in OBJECTS if self.can(k, p, o)]
        if options and rng.random() >= move_rate:
            return options[int(rng.integers(len(options)))]
        p = _pick(rng, self.people)
        return "move", p, _pick(rng, [x for x in PLACES if x != self.at[p]])

    def can(self, kind: str, p: str, o: str) -> bool:
        if kind == "get":
            return self.lying.get(o) == self.at[p]
        if kind == "drop":
            return self.holder.get(o) == p
        raise ValueError(kind)

    def perform(self, kind: str, p: str, x: str) -> None:
        if kind == "move":
            self.at[p] = x
        elif kind == "get":
            del self.lying[x]
            self.holder[x] = p
        elif kind == "drop":
            del self.holder[x]
            self.lying[x] = self.at[p]


def _statement_text(kind: str, p: str, x: str, rng: np.random.Generator, there_get: float) -> str:
    if kind == "move":
        return f"{p} {_pick(rng, MOVE_VERBS)} the {x}."
    verbs, rate = (GET_VERBS, there_get) if kind == "get" else (DROP_VERBS, THERE_RATE)
    return f"{p} {_pick(rng, verbs)} the {x}{' there' if rng.random() < rate else ''}."


def _qa3_question(rng: np.random.Generator, n_stmts: int, last: dict, spells: dict) -> str | None:
    """The text after the line number of one askable question, or None.

    ``last``: object -> (statement index, _Stmt) of its latest pick-up or drop;
    ``spells``: object -> moves of its carrier in that carrying spell."""
    askable = [o for o, (i, _) in sorted(last.items()) if n_stmts - i < WINDOW and len(spells[o]) >= 2]
    if not askable:
        return None
    o = _pick(rng, askable)
    pairs = list(zip(spells[o], spells[o][1:]))
    w = PAIR_DECAY ** np.arange(len(pairs))[::-1]
    m1, m2 = pairs[int(rng.choice(len(pairs), p=w / w.sum()))]
    event = last[o][1]
    return f"Where was the {o} before the {m2.what}? \t{m1.what}\t{event.line} {m2.line} {m1.line}"


def _qa3_story(rng: np.random.Generator, n_questions: int) -> list[str]:
    world = _HiddenWorld(rng, PEOPLE)
    lines: list[str] = []
    last: dict[str, tuple[int, _Stmt]] = {}
    spells: dict[str, list[_Stmt]] = {}
    n_stmts = asked = 0
    while asked < n_questions:
        for _ in range(2):
            kind, p, x = world.sample(("get", "drop"), MOVE_RATE)
            carried = [o for o, h in world.holder.items() if h == p]
            world.perform(kind, p, x)
            lines.append(f"{len(lines) + 1} {_statement_text(kind, p, x, rng, THERE_RATE)}")
            n_stmts += 1
            st = _Stmt(len(lines), kind, p, x)
            if kind == "move":
                for o in carried:
                    spells[o].append(st)
            else:
                last[x] = (n_stmts, st)
                if kind == "get":
                    spells[x] = []
        q = _qa3_question(rng, n_stmts, last, spells)
        if q is not None:
            lines.append(f"{len(lines) + 1} {q}")
            asked += 1
    return lines


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
        if task == "qa3":
            want = min(QUESTIONS_PER_STORY[task], n_questions - total)
            out.extend(_qa3_story(rng, want))
            total += want
            continue
        sw = _StoryWriter(task, rng)
        want = min(QUESTIONS_PER_STORY[task], n_questions - total)
        lo, hi = GAP[task]
        while sw.n_questions < want:
            for _ in range(int(rng.integers(lo, hi + 1))):
                sw.act()
            while not sw.question():
                sw.act()
        out.extend(sw.lines)
        total += sw.n_questions
    return out


# ---- checker: an independent simulation from the story text ---------------------------------
_P = r"([A-Z][a-z]+)"
_RX_MOVE = re.compile(rf"^{_P} (?:moved|went|journeyed|travelled|went back) to the (\w+)\.$")
_RX_GET = re.compile(rf"^{_P} (?:got|grabbed|picked up|took) the (\w+)(?: there)?\.$")
_RX_DROP = re.compile(rf"^{_P} (?:dropped|discarded|put down|left) the (\w+)(?: there)?\.$")
_RX_GIVE = re.compile(rf"^{_P} (?:gave|handed|passed) the (\w+) to {_P}\.$")
_RX_REL = re.compile(r"^The (\w+) is (north|south|east|west) of the (\w+)\.$")


def _answer(task: str, q: str, st: dict) -> tuple[str, set[int]]:
    """Answer and supporting lines for question ``q`` given the checker state ``st``."""
    if m := re.fullmatch(r"Where is (\w+)\?", q):
        if task == "qa1":
            p = m.group(1)
            return st["at"][p][0], {st["at"][p][1]}
    if m := re.fullmatch(r"Where is the (\w+)\?", q):
        o = m.group(1)
        if o in st["carrier"]:
            p, pl = st["carrier"][o]
            place, ml = st["at"][p]
            return place, {pl, ml}
        place, dl, ml = st["dropped"][o]
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
            return match[-1][slot], {match[-1][3]}
    raise AssertionError(f"unknown question form {q!r}")


def check_babi_lines(task: str, lines: list[str]) -> int:
    """Re-derive every answer and supporting set of a generated file; return #questions.

    Raises AssertionError naming the line on the first disagreement, or on a statement that
    breaks the world's rules (picking up an object lying elsewhere, dropping one not held,
    handing over to someone in another room).
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
                assert q.endswith(" "), "questions end with a space before the tab"
                got_sup = {int(s) for s in sup.split()}
                want = _answer(task, q.strip(), st)
                if isinstance(want, set):  # several readings are right; the file must give one
                    assert (ans, frozenset(got_sup)) in want, f"answer {ans!r} {sorted(got_sup)}, simulation {want}"
                    count += 1
                    continue
                want_ans, want_sup = want
                assert ans == want_ans, f"answer {ans!r}, simulation says {want_ans!r}"
                assert got_sup == want_sup, f"support {sorted(got_sup)}, simulation {sorted(want_sup)}"
                count += 1
                continue
            _apply(st, text, n)
        except AssertionError as e:
            raise AssertionError(f"{task} line {ln} ({line!r}): {e}") from None
    return count


def _apply(st: dict, text: str, n: int) -> None:
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
        here = st["at"].get(p, (None,))[0]  # a person's first room may be unstated
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
        assert st["at"].get(q, ("",))[0] == st["at"][p][0], f"{q} is not where {p} is"
        st["carrier"][o] = (q, n)
        st["gives"].append((p, o, q, n))
    elif m := _RX_REL.match(text):
        x, d, y = m.groups()
        st["rels"] += [(x, d, y, n), (y, OPPOSITE[d], x, n)]
    else:
        raise AssertionError(f"unknown statement {text!r}")
