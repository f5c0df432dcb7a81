"""Parser for Facebook bAbI v1.2 task files (DESIGN §7.1).

A file is a sequence of stories. Each line is ``<n> <statement>`` or, for a question,
``<n> <question>?\\t<answer>\\t<supporting line numbers>``; ``n`` restarts at 1 with every
story and question lines are numbered too. A line is a question by its shape (it holds a "?",
which no statement does), so a question whose tabs were lost is an error, not a statement; every
question must name at least one supporting line. Every question becomes one :class:`BabiSample`
whose ``facts`` are all statements of its story that precede it (earlier questions removed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envs.data.common import open_text, require_file
from envs.errors import DatasetFormatError

TASKS: tuple[str, ...] = (
    "qa1_single-supporting-fact",
    "qa2_two-supporting-facts",
    "qa3_three-supporting-facts",
    "qa4_two-arg-relations",
    "qa5_three-arg-relations",
    "qa6_yes-no-questions",
    "qa7_counting",
    "qa8_lists-sets",
    "qa9_simple-negation",
    "qa10_indefinite-knowledge",
    "qa11_basic-coreference",
    "qa12_conjunction",
    "qa13_compound-coreference",
    "qa14_time-reasoning",
    "qa15_basic-deduction",
    "qa16_basic-induction",
    "qa17_positional-reasoning",
    "qa18_size-reasoning",
    "qa19_path-finding",
    "qa20_agents-motivations",
)
SPLITS = ("train", "test")

HOW_TO_GET_BABI = (
    "download the Facebook bAbI v1.2 tasks (http://www.thespermwhale.com/jaseweston/babi/"
    "tasks_1-20_v1-2.tar.gz, folder en-10k) and place the files as {paths.babi_dir}/{task}_{split}.txt "
    "(default {data_root}/babilong/babi/en-10k/), e.g. qa1_single-supporting-fact_train.txt; "
    "or use the shipped real qa1-qa5 files with the override paths=embedded "
    "(rebuilt and verified by `python scripts/build_babi.py`), or generated ones with "
    "paths=generated (`python scripts/generate_data.py babi`)"
)


def short_key(task: str) -> str:
    """``qa3_three-supporting-facts`` -> ``qa3`` (the prefix before the first ``_``)."""
    return task.split("_", 1)[0]


def task_by_key(key: str) -> str:
    """Full task name for a short key (``qa3``) or a full name; KeyError if unknown."""
    for t in TASKS:
        if key in (t, short_key(t)):
            return t
    raise KeyError(f"unknown bAbI task {key!r}; known: {', '.join(TASKS)}")


@dataclass
class BabiSample:
    """One bAbI question with the story statements before it."""

    facts: list[str]
    question: str
    answer: str
    references_idx: list[int]  # positions in ``facts``, ascending
    supporting_lines: list[int] = field(default_factory=list)  # raw line numbers, file order
    line_no: int = 0  # 1-based line of the question in the file
    story: int = 0  # 0-based story index in the file


def parse_babi_lines(lines: list[str], path: str | Path = "<string>") -> list[BabiSample]:
    """Parse the lines of one bAbI file (see module docstring). Errors name path:line and what was
    expected, never the line's text: the path may name a file that is not bAbI data (issue 36)."""
    samples: list[BabiSample] = []
    # statements of the current story: line number -> (position in facts, text)
    by_num: dict[int, tuple[int, str]] = {}
    facts: list[str] = []
    story = -1
    prev_n = 0
    for ln, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        head, sep, rest = line.partition(" ")
        if not head.isdigit():
            raise DatasetFormatError(path, ln, "expected '<line number> <text>' with a numeric line number")
        n = int(head)
        if n == 1:
            story += 1
            by_num, facts = {}, []
        elif story < 0:
            raise DatasetFormatError(path, ln, f"the first story must start at line number 1, got {n}")
        elif n <= prev_n:
            raise DatasetFormatError(
                path, ln, f"line number {n} does not follow {prev_n} (a new story must restart at 1)"
            )
        prev_n = n
        if not sep or not rest.strip():
            raise DatasetFormatError(path, ln, "expected text after the line number")
        # A question is told by its shape, not its tabs: bAbI statements never hold a "?" or a tab.
        if "?" not in rest and "\t" not in rest:
            by_num[n] = (len(facts), rest)
            facts.append(rest)
            continue
        fields = rest.split("\t")
        while len(fields) > 3 and not fields[-1].strip():  # trailing tabs
            fields.pop()
        question = fields[0]
        if "?" not in rest or not question.rstrip().endswith("?") or len(fields) < 2:
            if "\t" not in rest:  # a question whose tabs were lost (e.g. turned into spaces)
                raise DatasetFormatError(
                    path,
                    ln,
                    "question without answer: expected '<n> <question>\\t<answer>\\t<supporting ids>' "
                    "(tab-separated); restore the tabs",
                )
            raise DatasetFormatError(
                path,
                ln,
                "expected a statement '<n> <text>' (no tab, no '?') or a question '<n> <question>?\\t<answer>"
                "\\t<supporting ids>'",
            )
        answer = fields[1].strip()
        if not question.strip() or not answer:
            raise DatasetFormatError(
                path,
                ln,
                "expected a question line '<n> <question>\\t<answer>\\t<supporting ids>' "
                "with a non-empty question and answer",
            )
        sup_field = fields[2].strip() if len(fields) > 2 else ""
        if not sup_field or len(fields) > 3:
            raise DatasetFormatError(
                path,
                ln,
                "expected '<n> <question>\\t<answer>\\t<supporting ids>' with the supporting line numbers as the "
                "third and last field; every question names the statements that answer it",
            )
        try:
            sup = [int(t) for t in sup_field.split()]
        except ValueError:
            raise DatasetFormatError(path, ln, "expected space-separated integer supporting line numbers") from None
        refs = []
        for s in sup:
            if s not in by_num:
                raise DatasetFormatError(path, ln, f"supporting line {s} is not a statement earlier in this story")
            pos, text = by_num[s]
            assert facts[pos] == text
            refs.append(pos)
        samples.append(
            BabiSample(
                facts=list(facts),
                question=question,
                answer=answer,
                references_idx=sorted(set(refs)),
                supporting_lines=sup,
                line_no=ln,
                story=story,
            )
        )
    return samples


def load_babi_file(path: str | Path, drop_last_question: bool = False) -> list[BabiSample]:
    """All questions of a bAbI file in file order.

    ``drop_last_question`` reproduces the reference's off-by-one length, which left the file's
    last question unreachable (``legacy.babi_drop_last_question``, DESIGN §11 #11).
    """
    p = require_file(Path(path), "a bAbI v1.2 task file ({task}_{split}.txt, numbered story lines)", HOW_TO_GET_BABI)
    with open_text(p) as f:
        lines = f.readlines()
    samples = parse_babi_lines(lines, p)
    if not samples:
        raise DatasetFormatError(p, None, "expected at least one question line (file has none)")
    if drop_last_question:
        samples = samples[:-1]
    return samples
