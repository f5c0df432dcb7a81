"""The repository cites only itself (issue 15): every section citation, document name and
defect number in a tracked text file must lead to something a reader of the repository can open.

* The former external specification is named nowhere (its sections now live in docs/DESIGN.md,
  numbered the same way).
* ``DESIGN §N`` / ``DESIGN §N.M`` (and the ``§`` citations chained after it on the same line,
  as in ``DESIGN §2.2, §8.4`` or ``DESIGN §1.4, §11 #48``) name a heading of docs/DESIGN.md;
  ``§11 #N`` names a row of its defect table.
* ``<doc>.md §N`` names a numbered heading of that document; a bare ``§N`` is allowed only inside
  a document under docs/ (it then means that document's own section). In code and configs a
  bare ``§N`` does not say which document it means, so it is an error.
* ``docs/<name>.md`` and upper-case document names (``SCORING.md``) name files that exist;
  nothing points into the shared folder next to the checkout.
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
H2 = re.compile(r"^##\s+(\d+)\.\s")
H3 = re.compile(r"^###\s+(\d+\.\d+)\s")


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
    found = set()
    for line in lines:
        m = H2.match(line) or H3.match(line)
        if m:
            found.add(m.group(1))
    return found


def defect_numbers(lines: list[str]) -> set[str]:
    """Row numbers (``| 22b |``) of the table under ``## 11.``."""
    rows, inside = set(), False
    for line in lines:
        if line.startswith("## "):
            inside = bool(re.match(r"##\s+11\.\s", line))
        elif inside:
            m = re.match(r"^\|\s*(\d+b?)\s*\|", line)
            if m:
                rows.add(m.group(1))
    return rows


def resolve_doc(name: str) -> str | None:
    """A document name as written (``docs/SCORING.md``, ``SCORING.md``) -> its tracked path."""
    for cand in (name, f"docs/{name}"):
        if cand in tracked_text() or (ROOT / cand).is_file():
            return cand
    return None


def citations(line: str, prev: str = "") -> list[tuple[str, str, str | None]]:
    """(scope, section, defect) of every § on ``line``. The scope is the qualifier right before
    the §, else that of the previous § on the line, else a qualifier ending the previous line
    ``prev`` (a citation wrapped after "DESIGN"), else "bare"."""
    out, scope = [], None
    for m in CITE.finditer(line):
        before = line[: m.start()]
        wrapped = scope is None and not before.strip(" \t#*/\"'")  # only indentation or comment marks
        q = QUALIFIER.search(before) or (QUALIFIER.search(prev.rstrip() + " ") if wrapped else None)
        if q:
            scope = q.group(1)
        elif scope is None:
            scope = "bare"
        out.append((scope, m.group(1), m.group(2)))
    return out


def citation_errors(path: str, line: str, prev: str = "") -> list[str]:
    """What is wrong with the § citations of ``line`` of ``path`` (empty when they all resolve);
    ``prev`` is the line before it."""
    errors = []
    for scope, section, defect in citations(line, prev):
        target = scope
        if scope in ("paper", "App.", "Sec."):
            continue  # the paper's own sections
        if scope == "bare":
            if not (path.startswith("docs/") and path.endswith(".md")):
                errors.append(f"bare §{section}: say which document (DESIGN §{section}, docs/<doc>.md §{section})")
                continue
            target = path
        elif scope == "DESIGN":
            target = DESIGN
        else:
            target = resolve_doc(scope)
            if target is None:
                errors.append(f"§{section} of {scope}, a document that does not exist")
                continue
        heads = numbered_headings(lines_of(target))
        if section not in heads:
            errors.append(f"§{section}: {target} has no heading numbered {section}")
        elif (
            defect is not None
            and target == DESIGN
            and section == "11"
            and defect not in defect_numbers(lines_of(DESIGN))
        ):
            errors.append(f"§11 #{defect}: no defect numbered {defect} in {DESIGN} §11")
    return errors


# -- the scanner itself, on worked cases -------------------------------------------------------


def test_design_has_every_section_and_defect():
    """docs/DESIGN.md keeps the numbering the citations use: §0-§11 with their sub-sections."""
    heads = numbered_headings(lines_of(DESIGN))
    expected_subs = {0: 3, 1: 5, 2: 7, 3: 5, 4: 6, 5: 9, 6: 2, 7: 12, 8: 8, 9: 6, 10: 7, 11: 0}
    for top, n_sub in expected_subs.items():
        assert str(top) in heads, f"{DESIGN} lacks '## {top}.'"
        for sub in range(1, n_sub + 1):
            assert f"{top}.{sub}" in heads, f"{DESIGN} lacks '### {top}.{sub}'"
    rows = defect_numbers(lines_of(DESIGN))
    assert {str(i) for i in range(1, 49)} | {"22b"} <= rows


@pytest.mark.parametrize(
    ("path", "line", "n_errors"),
    [
        ("rl/x.py", "see DESIGN §5.5, §11 #2 and §4.4", 0),
        ("rl/x.py", "see DESIGN §5.10", 1),  # no such sub-section
        ("rl/x.py", "DESIGN §12", 1),  # no such section
        ("rl/x.py", "DESIGN §10.1/§10.9", 1),  # the chained one inherits DESIGN and is wrong
        ("rl/x.py", "DESIGN §11 #49", 1),  # no such defect
        ("rl/x.py", "DESIGN §1.4, §11 #48", 0),
        ("rl/x.py", "# Retrieval metrics (§9.2)", 1),  # bare in code: which document?
        ("docs/RESULTS.md", "(this page's §1-§4)", 0),  # bare in a doc: its own sections
        ("docs/RESULTS.md", "see §9", 1),
        ("configs/x.yaml", "Below target: docs/RESULTS.md §2.", 0),
        ("configs/x.yaml", "docs/RESULTS.md §8", 1),
        ("configs/x.yaml", "docs/NOPE.md §2", 1),
        ("tests/x.py", "(paper §4, README's notes)", 0),
    ],
)
def test_scanner_worked_cases(path, line, n_errors):
    assert len(citation_errors(path, line)) == n_errors, citation_errors(path, line)


def test_scanner_follows_a_citation_wrapped_after_its_qualifier():
    prev = "the gradient step (DESIGN"
    assert citation_errors("rl/x.py", "§5.5 steps 1-4) and checkpoint state.", prev) == []
    assert len(citation_errors("rl/x.py", "§5.10 steps 1-4)", prev)) == 1  # still checked
    assert citation_errors("rl/x.py", "    # §5.5 steps", "    # the gradient step (DESIGN") == []
    assert len(citation_errors("rl/x.py", "§5.5 steps", "the gradient step")) == 1  # no qualifier: bare
    assert len(citation_errors("rl/x.py", "see §5.5", "(DESIGN")) == 1  # text before it: not a wrap


# -- the repository --------------------------------------------------------------------------------


def test_no_external_spec_is_named():
    hits = [
        f"{p}:{i}: {line.strip()[:100]}"
        for p, lines in tracked_text().items()
        for i, line in enumerate(lines, 1)
        if EXTERNAL_SPEC.search(line) or OUTSIDE.search(line)
    ]
    assert not hits, (
        "these lines cite files outside the repository; cite docs/DESIGN.md "
        "(same section numbers) or the paper instead:\n" + "\n".join(hits)
    )


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
    bad = []
    for p, lines in tracked_text().items():
        for i, line in enumerate(lines, 1):
            names = DOCS_PATH.findall(line) + DOC_NAME.findall(line)
            bad += [f"{p}:{i}: {name}" for name in names if resolve_doc(name) is None]
    assert not bad, "documents named but not in the repository:\n" + "\n".join(bad)
