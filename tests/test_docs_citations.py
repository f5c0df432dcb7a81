"""Dead links: every reference in a tracked text file leads to something in the repository.

* ``docs/<name>.md`` and upper-case document names (``SCORING.md``) name files that exist.
* ``DESIGN §N`` / ``DESIGN §N.M`` (and the ``§`` citations chained after it on the same line, as
  in ``DESIGN §2.2, §8.4``) name a numbered heading of docs/DESIGN.md, ``§11 #N`` a row of its
  defect table; ``<doc>.md §N`` a numbered heading of that document. A bare ``§N`` leads somewhere
  only inside a document under docs/ (its own section): in code and configs it is an error.
* A code path the docs or the README name (``rl/learners/pqn.py``, ``configs/algo/``, ``experiments/round4/``) exists,
  unless it is one of the few paths of other repositories listed in ELSEWHERE; one named at a commit
  (``git show <commit>:<path>``, a file the tree no longer holds) is a file of that commit.
* Nothing points to a specification outside the repository.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = "docs/DESIGN.md"
SELF = "tests/test_docs_citations.py"  # its worked cases are wrong on purpose

# Built from pieces so that a search-and-replace over the tree cannot rewrite this test's patterns.
EXTERNAL_SPEC = re.compile(r"\b" + "S" + r"PEC\b")
OUTSIDE = re.compile(r"\.\./shared/|/work/shared")
CITE = re.compile(r"§(\d+(?:\.\d+)?)(?:\s+#(\d+b?))?")
# what may stand right before a § to say which document it cites
QUALIFIER = re.compile(r"(DESIGN|paper|App\.|Sec\.|[\w./-]*\.md)(?:'s)?\s*$")
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w-]+\.md\b")
DOC_NAME = re.compile(r"(?<![\w/.-])([A-Z][A-Z0-9_]*\.md)\b")
CODE_PATH = re.compile(
    r"(?<![\w/.-])((?:rl|envs|runstore|scripts|examples|configs|tests|prompts_and_metrics|experiments)/[\w./-]*[\w/])"
)
REV_PATH = re.compile(r"(?<![\w/.-])([0-9a-f]{7,40}):$")  # the text before a path at a commit
HEADING = re.compile(r"^(?:##\s+(\d+)\.|###\s+(\d+\.\d+))\s")
# (document, path): files of other repositories (the authors' code, RULER) that a document names
ELSEWHERE = {
    ("docs/DQN.md", "rl/dqn.py"),
    ("docs/DATA_OTHER.md", "scripts/data/synthetic/niah.py"),
    ("docs/REPRODUCE.md", "scripts/data/prepare.py"),
    ("docs/SCORING.md", "scripts/eval/synthetic/constants.py"),
    ("docs/RETRIEVER_TOOL.md", "scripts/eval/evaluate.py"),  # RULER's evaluator
}


@cache
def tracked_text() -> dict[str, list[str]]:
    """Tracked files as lines, skipping gzipped and binary (NUL bytes or not UTF-8) files."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    out: dict[str, list[str]] = {}
    for name in names.decode().split("\0"):
        path = ROOT / name
        if not name or name == SELF or name.endswith(".gz") or not path.is_file():
            continue
        raw = path.read_bytes()
        if b"\0" in raw:
            continue
        try:
            out[name] = raw.decode("utf-8").splitlines()
        except UnicodeDecodeError:
            continue
    return out


def lines_of(path: str) -> list[str]:
    return tracked_text().get(path) or (ROOT / path).read_text(encoding="utf-8").splitlines()


def numbered_headings(lines: list[str]) -> set[str]:
    """``## 5. Learning`` -> "5", ``### 5.5 Optimiser step`` -> "5.5"."""
    return {m.group(1) or m.group(2) for m in map(HEADING.match, lines) if m}


def defect_numbers(lines: list[str]) -> set[str]:
    """Row numbers (``| 22b |``) of the table under ``## 11.``."""
    rows, inside = set(), False
    for line in lines:
        if line.startswith("## "):
            inside = bool(re.match(r"##\s+11\.\s", line))
        elif inside and (m := re.match(r"^\|\s*(\d+b?)\s*\|", line)):
            rows.add(m.group(1))
    return rows


def resolve_doc(name: str) -> str | None:
    """A document name as written (``docs/SCORING.md``, ``SCORING.md``) -> its path."""
    return next((c for c in (name, f"docs/{name}") if c in tracked_text() or (ROOT / c).is_file()), None)


def citation_errors(path: str, line: str, prev: str = "") -> list[str]:
    """The § citations of ``line`` of ``path`` that lead nowhere; ``prev`` is the line before it
    (a citation wrapped after "DESIGN"). A § takes the document named right before it, else that
    of the previous § on the line."""
    errors, scope = [], None
    for m in CITE.finditer(line):
        section, defect, before = m.group(1), m.group(2), line[: m.start()]
        wrapped = scope is None and not before.strip(" \t#*/\"'")  # only indentation or comment marks
        q = QUALIFIER.search(before) or (QUALIFIER.search(prev.rstrip() + " ") if wrapped else None)
        scope = q.group(1) if q else scope or "bare"
        if scope in ("paper", "App.", "Sec."):
            continue  # the paper's own sections
        if scope == "bare" and not (path.startswith("docs/") and path.endswith(".md")):
            errors.append(f"bare §{section}: say which document (DESIGN §{section}, docs/<doc>.md §{section})")
            continue
        target = {"bare": path, "DESIGN": DESIGN}.get(scope) or resolve_doc(scope)
        if target is None:
            errors.append(f"§{section} of {scope}, a document that does not exist")
        elif section not in numbered_headings(lines_of(target)):
            errors.append(f"§{section}: {target} has no heading numbered {section}")
        elif (
            defect is not None
            and (target, section) == (DESIGN, "11")
            and defect not in defect_numbers(lines_of(DESIGN))
        ):
            errors.append(f"§11 #{defect}: no defect numbered {defect} in {DESIGN} §11")
    return errors


@cache
def in_commit(rev: str, path: str) -> bool:
    """Whether ``path`` is a file of commit ``rev``; True when this checkout lacks the commit (a
    shallow clone), which leaves the other checkouts to catch a wrong one."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}^{{commit}}"], capture_output=True).returncode:
        return True
    return not subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}:{path}"], capture_output=True
    ).returncode


def dead_code_paths(doc: str, line: str) -> list[str]:
    """Code paths named on ``line`` of ``doc`` that no tracked file is or lies under (patterns
    with ``*`` or ``<name>`` placeholders are not paths). A path at a commit, ``<commit>:<path>`` (as
    ``git show`` takes it: a file the tree no longer holds, e.g. a round's old driver), must be a file
    of that commit."""
    files = tracked_text()
    dead = []
    for m in CODE_PATH.finditer(line):
        p = m.group(1)
        if (doc, p) in ELSEWHERE or line[m.end() : m.end() + 1] in ("*", "<", "{"):
            continue
        if rev := REV_PATH.search(line[: m.start()]):
            if not in_commit(rev.group(1), p):
                dead.append(f"{rev.group(1)}:{p}")
            continue
        if p not in files and not any(f.startswith(p.rstrip("/") + "/") for f in files) and not (ROOT / p).exists():
            dead.append(p)
    return dead


# -- the checks, on worked cases ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "line", "n_errors"),
    [
        ("rl/x.py", "see DESIGN §5.5, §11 #2 and §4.4", 0),
        ("rl/x.py", "see DESIGN §5.10", 1),  # no such sub-section
        ("rl/x.py", "DESIGN §10.1/§10.9", 1),  # the chained one inherits DESIGN and is wrong
        ("rl/x.py", "DESIGN §11 #99", 1),  # no such defect
        ("rl/x.py", "# Retrieval metrics (§9.2)", 1),  # bare in code: which document?
        ("docs/RESULTS.md", "see §9", 1),  # bare in a doc: its own sections
        ("configs/x.yaml", "docs/NOPE.md §2", 1),
        ("tests/x.py", "(paper §4, README's notes)", 0),
    ],
)
def test_section_citations_worked_cases(path, line, n_errors):
    assert len(citation_errors(path, line)) == n_errors, citation_errors(path, line)


def test_wrapped_citation_is_checked():
    assert citation_errors("rl/x.py", "    # §5.5 steps", "    # the gradient step (DESIGN") == []
    assert len(citation_errors("rl/x.py", "§5.10 steps 1-4)", "the gradient step (DESIGN")) == 1


def test_code_paths_worked_cases():
    assert dead_code_paths("docs/X.md", "see `rl/learners/pqn.py` and `configs/algo/`") == []
    assert dead_code_paths("docs/X.md", "`configs/learner/<name>.yaml`, `configs/envs/*.yaml`") == []
    assert dead_code_paths("docs/X.md", "the old `rl/pqn.py`") == ["rl/pqn.py"]
    assert dead_code_paths("docs/X.md", "The authors' `rl/dqn.py`") == ["rl/dqn.py"]  # only where listed
    assert dead_code_paths("docs/X.md", "`experiments/round4/runs/`") == ["experiments/round4/runs/"]  # now runs.tar.xz
    assert dead_code_paths("docs/X.md", "`examples/retrieve_example.sh`, `examples/nope.py`, `data/examples/x`") == [
        "examples/nope.py"
    ]


def test_code_paths_at_a_commit():
    """A file the tree no longer holds, named at a commit that has it, is no dead path; one the commit
    lacks is."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", "acd916b^{commit}"], capture_output=True).returncode:
        pytest.skip("this checkout lacks commit acd916b (a shallow clone)")
    assert dead_code_paths("docs/X.md", "`git show acd916b:experiments/round4/device.sh`") == []
    assert dead_code_paths("docs/X.md", "the gone `experiments/round4/device.sh`") == ["experiments/round4/device.sh"]
    assert dead_code_paths("docs/X.md", "`git show acd916b:experiments/round4/nope.sh`") == [
        "acd916b:experiments/round4/nope.sh"
    ]


# -- the repository --------------------------------------------------------------------------------


def test_no_external_spec_is_named():
    hits = [
        f"{p}:{i}: {line.strip()[:100]}"
        for p, lines in tracked_text().items()
        for i, line in enumerate(lines, 1)
        if EXTERNAL_SPEC.search(line) or OUTSIDE.search(line)
    ]
    assert not hits, "cite docs/DESIGN.md or the paper instead of files outside the repository:\n" + "\n".join(hits)


def test_every_section_citation_resolves():
    bad = [
        f"{p}:{i}: {err}"
        for p, lines in tracked_text().items()
        for i, line in enumerate(lines, 1)
        if "§" in line
        for err in citation_errors(p, line, lines[i - 2] if i > 1 else "")
    ]
    assert not bad, "section citations that lead nowhere:\n" + "\n".join(bad)


def test_every_named_document_exists():
    bad = [
        f"{p}:{i}: {name}"
        for p, lines in tracked_text().items()
        for i, line in enumerate(lines, 1)
        for name in DOCS_PATH.findall(line) + DOC_NAME.findall(line)
        if resolve_doc(name) is None
    ]
    assert not bad, "documents named but not in the repository:\n" + "\n".join(bad)


def test_every_code_path_the_docs_name_exists():
    bad = [
        f"{p}:{i}: {path}"
        for p, lines in tracked_text().items()
        if p == "README.md" or (p.startswith("docs/") and p.endswith(".md"))
        for i, line in enumerate(lines, 1)
        for path in dead_code_paths(p, line)
    ]
    assert not bad, "code paths the docs name that are not in the repository:\n" + "\n".join(bad)
