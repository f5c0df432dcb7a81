"""retrieve.py's own keys checked before the model is loaded (docs/RETRIEVER_TOOL.md): the numbers
are numbers of the right kind, and ``output=`` / ``export=`` name places the command may write,
so that a typo never costs a model load and a write never replaces a file the user needs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rl.tool.corpus_files import CorpusError, resolve_files
from rl.tool.corpus_search import SEARCHES
from rl.tool.errors import RetrieverError
from rl.tool.export import export_lock, export_target

ANSWER_KEYS = {"question", "picks", "n_chunks", "text_tokens"}  # a line retrieve.py's output= writes


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number_problems(cfg: DictConfig) -> list[str]:
    problems = []
    steps = cfg.get("steps")
    if steps is not None and not (_integer(steps) and steps >= 1):
        problems.append(f"steps={steps}: expected a whole number >= 1 (or null for the run's T)")
    for key in ("beam_width", "beam_expand"):
        value = cfg.get(key)
        if not (_integer(value) and value >= 1):
            problems.append(f"{key}={value}: expected a whole number >= 1")
    threshold = cfg.get("stop_threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        problems.append(f"stop_threshold={threshold}: expected a number (or null)")
    return problems


def is_answers_file(path: Path) -> bool:
    """An empty file, or one whose first line is a line retrieve.py writes to ``output=``."""
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline(1 << 20)
    if not first.strip():
        return True
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and ANSWER_KEYS <= row.keys()


def _parent_problem(key: str, path: Path) -> str | None:
    parent = path.parent
    if not parent.is_dir():
        return f"{key}={path}: the folder {parent} does not exist"
    if not os.access(parent, os.W_OK):
        return f"{key}={path}: the folder {parent} cannot be written"
    return None


def output_problems(cfg: DictConfig) -> list[str]:
    """``output=`` is never the text, the questions file or a file of the run folder, and replaces
    only an earlier answers file."""
    out = Path(str(cfg.output)).expanduser()
    problem = _parent_problem("output", out)
    if problem:
        return [problem]
    if out.is_dir():
        return [f"output={out}: is a folder; name a file, e.g. {out / 'answers.jsonl'}"]
    target = out.resolve()
    for key in ("text", "questions"):
        if cfg.get(key) is not None and Path(str(cfg[key])).expanduser().resolve() == target:
            return [f"output={out}: is the {key} file; name a new file"]
    run = Path(str(cfg.run)).expanduser().resolve()
    if target.is_relative_to(run):
        return [f"output={out}: is inside the run folder {run}; write the answers elsewhere"]
    if out.is_file() and not is_answers_file(out):
        return [f"output={out}: exists and is not an earlier answers file; remove it or name a new file"]
    return []


def export_problems(cfg: DictConfig) -> list[str]:
    """``export=`` must be a folder the export can create or replace, with no export to it running."""
    folder = Path(str(cfg.export)).expanduser()
    try:
        real = export_target(folder)
    except RetrieverError as e:
        return [str(e)]
    lock = export_lock(folder, real)
    holder = lock.holder()
    return [] if holder is None else [f"{lock.what} is in use by another process ({holder}); {lock.advice}"]


def index_problems(cfg: DictConfig) -> list[str]:
    """``index=`` / ``corpus=`` and the ``corpus_index`` numbers (rl/tool/corpus_index.py)."""
    problems = []
    node = cfg.corpus_index
    for key in ("shard_size", "ivf_nprobe", "hnsw_m", "hnsw_ef_construction", "hnsw_ef_search", "candidates"):
        if not (_integer(node[key]) and node[key] >= 1):
            problems.append(f"corpus_index.{key}={node[key]}: expected a whole number >= 1")
    if not (_integer(node.flat_max) and node.flat_max >= 0):
        problems.append(f"corpus_index.flat_max={node.flat_max}: expected a whole number >= 0")
    if node.ivf_nlist is not None and not (_integer(node.ivf_nlist) and node.ivf_nlist >= 1):
        problems.append(f"corpus_index.ivf_nlist={node.ivf_nlist}: expected a whole number >= 1 (or null)")
    if node.search not in SEARCHES:
        problems.append(f"corpus_index.search={node.search}: expected one of {', '.join(SEARCHES)}")
    if cfg.get("index") is None:
        if cfg.get("corpus") is not None:
            problems.append("corpus= needs index=<folder>: the folder the corpus is embedded into")
        return problems
    if cfg.get("text") is not None:
        problems.append("text= and index= exclude each other: retrieve from a text or from an index")
    if cfg.get("corpus") is None and cfg.get("question") is None and cfg.get("questions") is None:
        problems.append("index= needs corpus=<files> (to build it) or question=/questions= (to retrieve from it)")
    if cfg.get("corpus") is not None:
        try:
            resolve_files(cfg.corpus if isinstance(cfg.corpus, str) else list(cfg.corpus))
        except CorpusError as e:
            problems.append(str(e))
    return problems


def tool_problems(cfg: DictConfig) -> list[str]:
    """Every problem of retrieve.py's own keys, one line each."""
    problems = number_problems(cfg) + index_problems(cfg)
    if cfg.get("output") is not None:
        problems += output_problems(cfg)
    if cfg.get("export") is not None:
        problems += export_problems(cfg)
    return problems
