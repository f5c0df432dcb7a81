"""A trained retriever on any text (docs/RETRIEVER_TOOL.md):

    python retrieve.py run=runs/<run> text=book.txt question="Where is Mary?" [steps=3] [stop_threshold=0.5]
    python retrieve.py run=runs/<run> text=book.txt questions=questions.txt output=answers.jsonl
    python retrieve.py run=runs/<run> export=exported/
    python retrieve.py run=runs/<run> index=idx/ corpus=passages.jsonl   # embed a corpus once
    python retrieve.py index=idx/ questions=questions.txt output=answers.jsonl

Prints the chunks each question retrieves with the step, Q-value and position (chunk index and
character span in the text), or writes one JSON line per question to ``output``; ``export``
writes the encoders as Hugging Face folders (rl/tool/export.py); ``index`` embeds a corpus into a
folder once and retrieves from it (rl/tool/corpus_index.py). The work is rl/tool/retriever.py's QRAGRetriever.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

import rl.run.config  # noqa: F401  (registers the ${qrag_root:} resolver before composition)
from rl.run.config import PROJECT_ROOT
from rl.run.validate import ConfigError, check_group_choices, check_override_keys, report_and_exit, run_main
from rl.tool.corpus_index import CorpusIndex
from rl.tool.retriever import (
    QRAGRetriever,
    Retrieval,
    RetrieverError,
    eval_config,
    fill_run_from_index,
    read_questions,
    user_errors,
)


def run(cfg: DictConfig) -> list[Retrieval] | dict[str, Any]:
    """The command: export the encoders, build a corpus index, or retrieve for the question(s)
    from a text or an index; returns what it did."""
    fill_run_from_index(cfg)
    ev = eval_config(cfg)
    index = None if cfg.index is None else Path(str(cfg.index))
    if cfg.export is None:  # check the inputs before the model is loaded
        # read raw: a question may hold `${`, which OmegaConf would resolve (see _questions)
        asked = OmegaConf.to_container(cfg, resolve=False)["question"] is not None or cfg.questions is not None
        if index is not None and cfg.corpus is None and not asked:
            raise RetrieverError(
                "index= needs corpus=<files> (to build it) or question=/questions= (to retrieve from it)"
            )
        questions = _questions(cfg) if index is None or asked else []
        text = _text(cfg) if index is None else None
    retriever = QRAGRetriever.from_eval_config(ev)
    print(f"[retrieve] {retriever.describe()}", file=sys.stderr, flush=True)
    if index is not None and cfg.export is None:
        if cfg.corpus is not None:
            corpus = OmegaConf.to_container(cfg.corpus) if OmegaConf.is_list(cfg.corpus) else str(cfg.corpus)
            store = CorpusIndex.build(retriever, index, corpus, str(cfg.split), cfg.corpus_index, cfg.progress_bar)
            print(f"[retrieve] {index}: {store.n_chunks} chunks in {store.n_shards} shards", file=sys.stderr)
        if not questions:
            return store.manifest
        corpus_index = CorpusIndex.open(retriever, index, cfg.corpus_index)
        print(f"[retrieve] {corpus_index.describe()}", file=sys.stderr, flush=True)
    if cfg.export is not None:
        done = retriever.export(Path(str(cfg.export)))
        what = (
            "state_encoder/, chunk_encoder/, sentence_transformer/, query/ and document/"
            if done["sentence_transformer"]
            else "state_encoder/ and chunk_encoder/ (no sentence_transformer/: sentence-transformers is not installed)"
        )
        print(f"[retrieve] exported {what} to {cfg.export}; see its README.md")
        return done
    out = None if cfg.output is None else Path(str(cfg.output))
    bar = tqdm(total=len(questions), desc="retrieve", disable=not cfg.progress_bar or len(questions) < 2)
    sink = open(out, "w", encoding="utf-8") if out is not None else None
    done_count = [0]
    try:

        def emit(result: Retrieval) -> None:
            extra = questions[done_count[0]]
            done_count[0] += 1
            if sink is not None:
                sink.write(json.dumps({**extra, **result.to_dict()}, ensure_ascii=False) + "\n")
                sink.flush()
            else:
                bar.clear()
                print(show(result), flush=True)
            bar.update(1)

        rules = dict(
            steps=None if cfg.steps is None else int(cfg.steps),
            stop_threshold=None if cfg.stop_threshold is None else float(cfg.stop_threshold),
            planner=str(cfg.planner),
            beam_width=int(cfg.beam_width),
            beam_expand=int(cfg.beam_expand),
            on_result=emit,
        )
        asked = [q["question"] for q in questions]
        if index is not None:
            results = corpus_index.retrieve_batch(asked, **rules)
        else:
            results = retriever.retrieve_batch(asked, text, split=str(cfg.split), **rules)
    finally:
        bar.close()
        if sink is not None:
            sink.close()
    if out is not None:
        print(f"[retrieve] {len(results)} questions -> {out}", file=sys.stderr)
    return results


def _questions(cfg: DictConfig) -> list[dict[str, Any]]:
    # The question as typed: OmegaConf would resolve a `${` in it as an interpolation of this config.
    question = OmegaConf.to_container(cfg, resolve=False)["question"]
    if (question is None) == (cfg.questions is None):
        raise RetrieverError('pass either question="..." or questions=<file> (or export=<folder>)')
    if question is not None:
        return [{"question": str(question)}]
    return read_questions(Path(str(cfg.questions)))


def _text(cfg: DictConfig) -> str:
    if cfg.text is None:
        raise RetrieverError("text=<file> is required: the text to retrieve from")
    path = Path(str(cfg.text))
    if not path.is_file():
        raise RetrieverError(f"text={path}: no such file")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not part of the first chunk
    except UnicodeDecodeError as e:
        raise RetrieverError(f"text={path}: not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise RetrieverError(f"text={path}: the text is empty: there is nothing to retrieve from")
    return text


def show(result: Retrieval) -> str:
    lines = [f"question: {result.question}  ({result.n_chunks} chunks, {result.text_tokens} tokens)"]
    for p in result.picks:
        where = f"chunk {p.index}" + ("" if p.start is None else f", chars {p.start}-{p.end}")
        lines.append(f"  step {p.step}  Q={p.q_value:.4f}  [{where}]  {p.chunk}")
    return "\n".join(lines)


@hydra.main(config_path="configs", config_name="retrieve", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except ConfigError as e:
        report_and_exit(e)
    except (*user_errors(), FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    try:
        check_group_choices(sys.argv[1:], PROJECT_ROOT / "configs")
        check_override_keys(sys.argv[1:], PROJECT_ROOT / "configs", "retrieve")
    except ConfigError as exc:
        report_and_exit(exc)
    run_main(main)
