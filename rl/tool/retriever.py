"""A trained Q-RAG retriever as a tool: load a run folder, retrieve from any text (docs/RETRIEVER_TOOL.md).

    retriever = QRAGRetriever.from_run("runs/<run>")
    result = retriever.retrieve("Where is Mary?", open("book.txt").read(), steps=3)

The retriever does not re-implement anything the evaluation loop does: the run folder is read by the
evaluation's merge rule (rl/run/eval_config.py) and checkpoint loader (rl/run/load_run.py), each
(question, chunks) pair becomes one sample of a small in-memory dataset, and its episode is driven
by the very greedy loop or beam planner of ``eval_retriever.py`` (rl/eval/greedy.py,
rl/eval/beam.py). So the picks of the tool and of the evaluation on the same sample are the same by
construction. The sample has no gold chunks (``sf_known`` false): the test feedback then pays
nothing and never ends an episode, so only the step budget and the Q-value stop rule end it, as in
evaluation.

Every name this module takes from the rest of ``rl`` is imported in the block below.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from envs.data.splitter import split_sentences
from envs.feedback import build_feedback
from envs.legacy import Legacy
from rl.distributed import pick_device
from rl.eval.beam import beam_episodes
from rl.eval.greedy import greedy_episodes
from rl.model.precision import Precision
from rl.run.build import eval_settings
from rl.run.config import compose_config, without_hydra
from rl.run.eval_config import EvalError, merge_eval_config
from rl.run.load_run import checkpoint_path, load_qnet
from rl.run.validate import ConfigError, check_eval, report_and_exit
from rl.tool.errors import RetrieverError
from rl.tool.export import export_encoders
from rl.tool.shard_store import MANIFEST, IndexStoreError, ShardStore
from rl.tool.tool_inputs import tool_problems

SPLITS = ("sentences", "lines")
PLANNERS = ("greedy", "beam")


@dataclass
class Pick:
    """One retrieved chunk: the step that took it (1 = first), its index in the chunk list, its
    text, the Q-value it was picked with and, for a split text, its character span."""

    step: int
    index: int
    chunk: str
    q_value: float
    start: int | None = None
    end: int | None = None


@dataclass
class Retrieval:
    """What one question retrieved: the picks in the order they were taken."""

    question: str
    picks: list[Pick]
    n_chunks: int
    text_tokens: int  # encoder tokens of question + chunks, specials included (as evaluation's text_len)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "picks": [asdict(p) for p in self.picks]}


def split_text(text: str, how: str = "sentences") -> tuple[list[str], list[tuple[int, int]]]:
    """Chunks of ``text`` and their character spans. ``sentences``: the project's sentence
    splitter (envs/data/splitter.py, which the NIAH and BabiLong-HF loaders split raw text with);
    ``lines``: one chunk per non-empty line. Chunks are stripped, so each is ``text[start:end]``."""
    if how not in SPLITS:
        raise RetrieverError(f"split={how!r}: expected one of {', '.join(SPLITS)}")
    pieces = split_sentences(text) if how == "sentences" else [x.strip() for x in text.splitlines() if x.strip()]
    spans, cursor = [], 0
    for piece in pieces:
        start = text.find(piece, cursor)  # every piece is a verbatim, stripped substring, in order
        spans.append((start, start + len(piece)))
        cursor = start + len(piece)
    return pieces, spans


def check_run_folder(cfg: DictConfig) -> None:
    """The run folder must exist (evaluation's own message names ``pretrained_path``, not ``run``)."""
    run = Path(str(cfg.pretrained_path)).expanduser()
    if not run.is_dir():
        raise RetrieverError(f"run={run}: no such folder (pass the folder of a training run)")


class QRAGRetriever:
    """A trained retriever loaded from its run folder; see the module docstring."""

    def __init__(self, qnet: Any, cfg: DictConfig, checkpoint: Path):
        self.qnet, self.cfg, self.checkpoint = qnet, cfg, checkpoint
        self.max_steps = int(cfg.envs.max_steps)  # the T the run was trained with
        self.legacy = Legacy.from_cfg(cfg.legacy)  # the run's switches, for the feedback of each call

    # -- loading ----------------------------------------------------------------------------
    @classmethod
    def from_run(cls, run: str | Path, use_last: bool = False, device: str = "auto") -> QRAGRetriever:
        """The best (``model_best.pt``) or last (``use_last``) checkpoint of a run folder, on
        ``device`` (auto: a GPU if there is one, else the CPU)."""
        cfg = compose_config("testing", ["progress_bar=false"])
        with open_dict(cfg):
            cfg.pretrained_path = str(run)
            cfg.use_last = bool(use_last)
            cfg.device = str(device)
        return cls.from_eval_config(cfg)

    @classmethod
    def from_eval_config(cls, cfg: DictConfig) -> QRAGRetriever:
        """From an evaluation config (configs/testing.yaml's keys, ``pretrained_path`` set), merged
        over the run's config.yaml by evaluation's rule (docs/EVALUATION.md)."""
        check_run_folder(cfg)
        merged = merge_eval_config(cfg, reads_data=False)
        check_eval(merged)
        device = pick_device(str(merged.device))
        Precision.resolve(str(merged.precision), device).apply()
        ckpt = checkpoint_path(merged)
        return cls(load_qnet(merged, ckpt, device), merged, ckpt)

    # -- retrieval --------------------------------------------------------------------------
    def retrieve(
        self,
        question: str,
        text_or_chunks: str | Sequence[str],
        steps: int | None = None,
        stop_threshold: float | None = None,
        planner: str = "greedy",
        beam_width: int = 4,
        beam_expand: int = 3,
        split: str = "sentences",
    ) -> Retrieval:
        """The chunks ``question`` retrieves from a text (split into chunks by ``split``) or a list
        of chunks. ``steps``: picks at most (default: the run's T); ``stop_threshold``: stop
        before a step t > 0 whose best Q is ≤ it (evaluation's ``eval.stop_q_threshold``)."""
        return self.retrieve_batch(
            [question], text_or_chunks, steps, stop_threshold, planner, beam_width, beam_expand, split
        )[0]

    def retrieve_batch(
        self,
        questions: Sequence[str],
        text_or_chunks: str | Sequence[str] | Sequence[str | Sequence[str]],
        steps: int | None = None,
        stop_threshold: float | None = None,
        planner: str = "greedy",
        beam_width: int = 4,
        beam_expand: int = 3,
        split: str = "sentences",
        on_result: Callable[[Retrieval], None] | None = None,
    ) -> list[Retrieval]:
        """:meth:`retrieve` for several questions: over one shared text or chunk list, or over one
        text or chunk list per question (a list as long as ``questions`` whose items are texts or
        lists). Greedy episodes are stepped together in groups of the run's ``eval_group_size``.
        ``on_result`` is called with each result as it is finished (progress, streaming output)."""
        questions = list(questions)
        if not questions:
            raise RetrieverError("no question given")
        contexts = self._contexts(text_or_chunks, len(questions), split)
        samples = [self._sample(k, q, chunks) for k, (q, (chunks, _)) in enumerate(zip(questions, contexts))]
        settings = self.settings(steps, stop_threshold, planner, beam_width, beam_expand)
        envs = self.cfg.envs
        feedback = build_feedback(self.cfg.feedback, envs, "test", str(envs.task), self.legacy)
        indices = list(range(len(samples)))
        if planner == "beam":
            records = beam_episodes(self.qnet, samples, indices, feedback, settings, int(beam_width), int(beam_expand))
        else:
            records = greedy_episodes(self.qnet, samples, indices, feedback, settings)
        out = []
        for rec, (chunks, spans) in zip(records, contexts):
            picks = [
                Pick(t + 1, j, chunks[j], float(q), *(spans[j] if spans else (None, None)))
                for t, (j, q) in enumerate(zip(rec["pred_idx"], rec["q_values"]))
            ]
            out.append(Retrieval(rec["question"], picks, len(chunks), int(rec["text_len"])))
            if on_result is not None:
                on_result(out[-1])
        return out

    def _contexts(self, given: Any, n: int, split: str) -> list[tuple[list[str], list[tuple[int, int]] | None]]:
        """(chunks, character spans or None) per question."""
        shared = isinstance(given, str) or (isinstance(given, (list, tuple)) and all(isinstance(x, str) for x in given))
        if shared:
            one = self._context(given, split)
            return [one] * n  # split once; the episodes share its tokens and embeddings (docs/RETRIEVER_TOOL.md)
        if not isinstance(given, (list, tuple)) or len(given) != n:
            raise RetrieverError(
                "text_or_chunks: expected a text, a list of chunks, or one text or chunk list per question "
                f"({n} questions)"
            )
        return [self._context(x, split) for x in given]

    @staticmethod
    def _context(given: Any, split: str) -> tuple[list[str], list[tuple[int, int]] | None]:
        if isinstance(given, str):
            if not given.strip():
                raise RetrieverError("the text is empty: there is nothing to retrieve from")
            return split_text(given, split)
        if not isinstance(given, (list, tuple)) or not given:
            raise RetrieverError("the chunk list is empty: there is nothing to retrieve from")
        for k, chunk in enumerate(given):
            if not isinstance(chunk, str) or not chunk.strip():
                raise RetrieverError(f"chunk {k} is {'empty' if isinstance(chunk, str) else type(chunk).__name__}")
        return list(given), None

    def _sample(self, k: int, question: str, chunks: list[str]) -> dict[str, Any]:
        """One sample without gold: evaluation's test feedback pays 0 for it and never ends it."""
        if not isinstance(question, str) or not question.strip():
            raise RetrieverError(f"question {k + 1} is empty")
        self.check_question(question)
        return {"id": k, "question": question, "answer": "", "chunks": chunks, "sf_idx": [], "sf_known": False}

    def check_question(self, question: str) -> None:
        """Refuse a question longer than the state keeps of it: states hold at most the evaluation's
        segment cap (``eval_max_action_length_in_memory`` − 2 tokens, as in training's
        ``max_action_length_in_memory``) of the question, and a silently cut question would be
        another question."""
        inputs = self.qnet.inputs
        _, length = inputs.question_ids(question)  # the length before the cut
        cap = int(inputs.eval_memory_content)
        if length > cap:
            raise RetrieverError(
                f"the question is {length} tokens long; this retriever reads at most {cap} question tokens "
                f"(its state segment cap, eval_max_action_length_in_memory − 2): shorten the question"
            )

    def settings(
        self, steps: int | None, stop_threshold: float | None, planner: str, beam_width: int, beam_expand: int
    ) -> Any:
        """Evaluation's episode settings for these retrieval options, checked (the tool's and the
        corpus index's one check)."""
        if planner not in PLANNERS:
            raise RetrieverError(f"planner={planner!r}: expected one of {', '.join(PLANNERS)}")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise RetrieverError(f"steps={steps!r}: expected an integer ≥ 1")
        if stop_threshold is not None and not math.isfinite(float(stop_threshold)):
            raise RetrieverError(f"stop_threshold={stop_threshold!r}: expected a finite number")
        if planner == "beam":
            if stop_threshold is not None:
                raise RetrieverError("stop_threshold works with the greedy planner only (as in evaluation)")
            if int(beam_width) < 1 or int(beam_expand) < 1:
                raise RetrieverError(f"beam_width and beam_expand must be ≥ 1, got {beam_width} and {beam_expand}")
        settings = eval_settings(self.cfg)
        settings.max_steps = self.max_steps if steps is None else int(steps)
        settings.stop_q_threshold = None if stop_threshold is None else float(stop_threshold)
        return settings

    # -- export -------------------------------------------------------------------------------
    def export(self, folder: str | Path) -> dict[str, Any]:
        """Write the encoders as Hugging Face folders and, where sentence-transformers is installed,
        as one sentence-transformers model over both: rl/tool/export.py."""
        return export_encoders(self.qnet, self.cfg, self.checkpoint, Path(folder))

    def describe(self) -> str:
        envs = self.cfg.envs
        return (
            f"{self.checkpoint} ({self.cfg.algo.model.name}, trained on {envs.name}/{envs.task}, T = {self.max_steps}, "
            f"positions {envs.positions_processor}) on {self.qnet.device}"
        )


def read_questions(path: Path) -> list[dict[str, Any]]:
    """Questions of a file: ``.jsonl`` = one object per line with a ``question`` (its other keys are
    kept in the output), anything else = one question per non-empty line."""
    if not path.is_file():
        raise RetrieverError(f"questions={path}: no such file")
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the first question
    except UnicodeDecodeError as e:
        raise RetrieverError(f"questions={path}: not UTF-8 text (byte {e.start})") from None
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if path.suffix.lower() != ".jsonl":
            out.append({"question": line.strip()})
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise RetrieverError(f"{path}:{no}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("question"), str):
            raise RetrieverError(f"{path}:{no}: expected an object with a string 'question'")
        out.append(obj)
    if not out:
        raise RetrieverError(f"{path}: holds no question")
    return out


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that are the user's to fix, reported as one ``error:`` line."""
    from envs.types import SampleError
    from rl.model.embedder import ModelLoadError
    from rl.tool.corpus_files import CorpusError
    from runstore import StorageError

    return (
        RetrieverError,
        EvalError,
        ConfigError,
        ModelLoadError,
        StorageError,
        SampleError,
        CorpusError,
        IndexStoreError,
    )


# configs/retrieve.yaml's own keys; the rest of it is configs/testing.yaml's evaluation config
TOOL_KEYS = (
    "run",
    "text",
    "split",
    "question",
    "questions",
    "output",
    "steps",
    "stop_threshold",
    "planner",
    "beam_width",
    "beam_expand",
    "export",
    "index",
    "corpus",
    "corpus_index",
)


def fill_run_from_index(cfg: DictConfig) -> None:
    """``index=`` without ``run=``: the run the index was built with (its manifest's ``run``, a path
    taken as written: a folder someone sent must not make this process resolve ``${...}``)."""
    if (OmegaConf.is_missing(cfg, "run") or not cfg.get("run")) and cfg.get("index") is not None:
        folder = Path(str(cfg.index)).expanduser()
        if cfg.get("corpus") is None or (folder / MANIFEST).is_file():  # (a new build needs run=)
            run = ShardStore.open(folder).manifest.get("run")
            if not isinstance(run, str) or not run or "${" in run:
                raise IndexStoreError(
                    f"index={folder}: its manifest names no plain run folder ({run!r}); pass run=<the run folder>"
                )
            cfg.run = run


def eval_config(cfg: DictConfig) -> DictConfig:
    """The evaluation config inside a retrieve.py config: without the hydra node and the tool's
    own keys (a question is text, never merged or resolved as config), ``pretrained_path`` = ``run``."""
    if OmegaConf.is_missing(cfg, "run") or not cfg.get("run"):
        raise RetrieverError("run= is required: the folder of a training run, e.g. run=runs/<date>_QRAG_<task>")
    plain = without_hydra(cfg)
    for k in TOOL_KEYS:
        if k in plain:
            del plain[k]
    plain.pretrained_path = str(cfg.run)
    return plain


class ValidateRetrieve(Callback):
    """Hydra callback of retrieve.py: the run folder and the merged evaluation config checked
    before the command runs, one ``error:`` line per problem (exit status 2)."""

    def __init__(self, kind: str = "retrieve"):
        self.kind = kind  # (configs/testing.yaml's callback node passes one)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            fill_run_from_index(config)
            ev = eval_config(config)
            check_run_folder(ev)
            problems = tool_problems(config)
            if problems:
                raise ConfigError(problems)
            check_eval(merge_eval_config(ev, reads_data=False))
        except ConfigError as e:
            report_and_exit(e)
        except (RetrieverError, EvalError, IndexStoreError) as e:
            report_and_exit(ConfigError([str(e)]))


__all__ = ["Pick", "QRAGRetriever", "Retrieval", "RetrieverError", "read_questions", "split_text"]
