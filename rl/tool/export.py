"""Export a trained retriever's encoders as standard Hugging Face folders (docs/RETRIEVER_TOOL.md).

``<folder>/state_encoder`` and ``<folder>/chunk_encoder`` are ``save_pretrained`` folders of the
online state encoder E_s and chunk (action) encoder E_a, each with the tokenizer, loadable by
``transformers.AutoModel``; ``qrag_retriever.json`` holds what the backbones alone do not carry
(pooling, pool_scale, normalisation, prefixes, token caps, the rotary position rule) and
``README.md`` says it in prose, with what the folders cannot do alone. Where sentence-transformers
is installed (the optional extra ``st``), ``sentence_transformer`` is one sentence-transformers
model over both encoders (its ``Router`` module: queries through E_s, documents through E_a), so
that ``SentenceTransformer(folder).encode_query`` / ``encode_document`` give the retriever's own
embeddings of a question alone and of a chunk; ``query`` and ``document`` are those two routes as
sentence-transformers models of their own (a corpus embedded offline with one, questions served
with the other)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from rl.tool.errors import RetrieverError
from runstore import (
    DiskFullError,
    FolderLock,
    NotWritableError,
    disk_full_cause,
    disk_full_message,
    not_writable_cause,
    not_writable_message,
)

log = logging.getLogger(__name__)
WORD = re.compile(r"\w+")

# the project's pooling names as sentence-transformers' Pooling modes
ST_POOLING = {"mean": "mean", "cls": "cls", "last": "lasttoken"}


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def settings_of(qnet: Any, cfg: DictConfig, checkpoint: Path) -> dict[str, Any]:
    """What a user of the exported backbones needs to embed as the retriever does."""
    enc, envs = qnet.state_enc, cfg.envs
    return {
        "run": str(cfg.pretrained_path),
        "checkpoint": checkpoint.name,
        "base_model": str(cfg.algo.model.name),
        "layers": int(qnet.state_enc.backbone.config.num_hidden_layers),
        "dim": int(qnet.dim),
        "pooling": enc.pooling,
        "pool_scale": float(enc.pool_scale),
        "normalize": bool(enc.normalize),
        "query_prefix": qnet.inputs.query_prefix,
        "passage_prefix": qnet.inputs.passage_prefix,
        "max_chunk_tokens": int(qnet.inputs.layout.action_cap),
        "max_state_segment_tokens": int(qnet.inputs.eval_memory_content) + 2,
        "max_state_tokens": int(qnet.inputs.layout.state_cap),
        "task": f"{envs.name}/{envs.task}",
        "max_steps": int(envs.max_steps),
        "positions": {
            "processor": str(envs.positions_processor),
            "step_size": int(envs.step_size),
            "formula": str(envs.relative_formula),
            "rope_interpolate_factor": float(qnet.rope.interpolate_factor),
        },
        "sort_by_index": bool(envs.sort_by_index),
    }


def export_target(folder: Path) -> Path:
    """The folder an export to ``folder`` creates or replaces (a link's target, ``.`` by its name),
    checked before anything is written; a RetrieverError says why there is none. The export is
    written beside it and renamed into place, so the target must be a new or empty folder that a
    rename can replace."""
    key = f"export={folder}"
    if folder.is_symlink() and not folder.exists():
        raise RetrieverError(f"{key}: is a link to {os.readlink(folder)}, which does not exist; name a new folder")
    real = folder.resolve()
    if real.exists() and not real.is_dir():
        raise RetrieverError(f"{key}: is a file; name a new folder")
    if real.is_dir():
        if any(real.iterdir()):
            raise RetrieverError(f"{key}: the folder exists and is not empty; choose a new one")
        if real == Path.cwd().resolve():
            raise RetrieverError(f"{key}: is the current folder, which the export cannot replace; name a new folder")
        if os.path.ismount(real):
            raise RetrieverError(f"{key}: is a mount point, which the export cannot replace; name a folder inside it")
    ancestor = real.parent
    while not ancestor.exists():  # the export makes the missing folders
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK):
        raise RetrieverError(f"{key}: {ancestor} cannot be written")
    return real


def export_lock(folder: Path, real: Path) -> FolderLock:
    """One export at a time to a target: the loser is refused before it writes, and the holder
    knows that work folders of this target are leftovers of killed exports."""
    return FolderLock(
        real.parent / f".{real.name}.export.lock", f"export={folder}", "wait for that export or name another folder"
    )


def export_encoders(qnet: Any, cfg: DictConfig, checkpoint: Path, folder: Path) -> dict[str, Any]:
    """Write the folders; returns the settings written to ``qrag_retriever.json`` plus
    ``sentence_transformer`` (whether that folder was written)."""
    real = export_target(folder)
    with export_lock(folder, real):
        real = export_target(folder)  # again under the lock: another export may have finished meanwhile
        # written beside the target and renamed once complete: a kill leaves no half export at ``folder``
        prefix = f".{real.name}.export-"
        # the suffix a pid (or an older version's mkdtemp): not another target's `.<name>.export-x.export-<pid>`
        stale = [
            p for p in real.parent.iterdir() if p.name.startswith(prefix) and WORD.fullmatch(p.name[len(prefix) :])
        ]
        for p in stale:  # no export to this target runs (we hold its lock): these are killed ones' work
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        if stale:
            log.warning("export=%s: removed %d work folder(s) left by an interrupted export", folder, len(stale))
        work = real.parent / f"{prefix}{os.getpid()}"
        work.mkdir()  # not tempfile.mkdtemp, whose mode 700 the renamed export would keep: the umask's
        try:
            done = _write_export(qnet, cfg, checkpoint, work)
            if real.exists():
                real.rmdir()  # empty (checked above)
            work.rename(real)
        except BaseException as exc:
            shutil.rmtree(work, ignore_errors=True)
            error = _storage_error(exc, real)
            if error is None:
                raise
            raise error from None
    return done


def _storage_error(exc: BaseException, real: Path) -> Exception | None:
    """A full disk or an unwritable folder as one line (nothing was exported), else None.
    safetensors reports a full disk as its own error, without an errno: its message says it."""
    if disk_full_cause(exc) is not None or "(os error 28)" in str(exc):
        return DiskFullError(disk_full_message(real, "nothing was exported", "export again"))
    cause = not_writable_cause(exc)
    return None if cause is None else NotWritableError(not_writable_message(real, cause, "export again"))


def _write_export(qnet: Any, cfg: DictConfig, checkpoint: Path, folder: Path) -> dict[str, Any]:
    settings = settings_of(qnet, cfg, checkpoint)
    for name, enc in (("state_encoder", qnet.state_enc), ("chunk_encoder", qnet.action_enc)):
        enc.backbone.save_pretrained(folder / name)
        qnet.inputs.tokenizer.save_pretrained(folder / name)
    settings["shared_encoders"] = same_weights(qnet.state_enc.backbone, qnet.action_enc.backbone)
    missing = sentence_transformers_missing()
    settings["sentence_transformer"] = missing is None
    text = readme(settings, missing)
    if missing is None:
        write_sentence_transformer(folder, settings, text)
    (folder / "qrag_retriever.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(text, encoding="utf-8")
    return settings


def sentence_transformers_missing() -> str | None:
    """Why no sentence-transformers folder can be written here (None: it can)."""
    try:  # the module path of sentence-transformers 6 (the optional extra `st`)
        from sentence_transformers.sentence_transformer.modules import Router  # noqa: F401
    except ImportError:
        return "sentence-transformers >= 6.2 is not installed (pip install -e '.[st]'; scripts/install.sh does)"
    return None


def write_sentence_transformer(folder: Path, s: dict[str, Any], readme_text: str) -> None:
    """``folder/sentence_transformer``: one sentence-transformers model whose ``Router`` sends queries
    (``encode_query``) through E_s and documents (``encode_document``, and plain ``encode``, prompt
    included) through E_a; ``folder/query`` and ``folder/document``: each route as a model of its own. Each route is Transformer -> Pooling (the run's pooling) -> Normalize (where the run
    normalises) -> Dense(pool_scale * identity, no bias), so its vectors are the retriever's own,
    scale included: a dot product of a query's and a chunk's vector is the retriever's Q-value of
    that chunk without positions. Built from the two exported backbone folders and saved by the
    library itself, so the folder is in the layout the installed version reads."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Router, Transformer
    from transformers.utils import logging as hf_logging

    def route(backbone: str, max_tokens: int) -> list[torch.nn.Module]:
        dim = s["dim"]
        modules = [
            Transformer(str(folder / backbone), max_seq_length=max_tokens),
            Pooling(dim, ST_POOLING[s["pooling"]]),
        ]
        if s["normalize"]:
            modules.append(Normalize())
        scale = torch.eye(dim) * s["pool_scale"]
        return [*modules, Dense(dim, dim, bias=False, activation_function=torch.nn.Identity(), init_weight=scale)]

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the exported backbones' missing pooler weights are expected
    try:
        # a question alone is one state segment: [CLS] question [SEP], cut as the retriever cuts it
        routes = {
            "query": (route("state_encoder", s["max_state_segment_tokens"]), s["query_prefix"]),
            "document": (route("chunk_encoder", s["max_chunk_tokens"]), s["passage_prefix"]),
        }
        router = Router.for_query_document(query_modules=routes["query"][0], document_modules=routes["document"][0])
        models = {
            "sentence_transformer": SentenceTransformer(
                modules=[router],
                prompts={name: prefix for name, (_, prefix) in routes.items()},
                default_prompt_name="document",  # plain `encode` embeds as `encode_document` does
                similarity_fn_name="dot",
                device="cpu",
            )
        }
        # each route alone, the same modules: a corpus embedded offline with `document/`, questions
        # served online with `query/` (each one's default prompt is its prefix, so plain `encode` works)
        for name, (modules, prefix) in routes.items():
            models[name] = SentenceTransformer(
                modules=modules,
                prompts={name: prefix},
                default_prompt_name=name,
                similarity_fn_name="dot",
                device="cpu",
            )
        for name, model in models.items():
            model.save(str(folder / name))
            # the library's generic model card would describe a symmetric similarity model: ours says what it is
            (folder / name / "README.md").write_text(readme_text, encoding="utf-8")
    finally:
        hf_logging.set_verbosity(verbosity)


def readme(s: dict[str, Any], st_missing: str | None) -> str:
    pos = s["positions"]
    same = (
        "This run's state and chunk encoders hold identical weights (an untrained run)."
        if s["shared_encoders"]
        else "This run's state and chunk encoders hold different weights (Q-RAG trains them apart)."
    )
    st = (
        f"""`sentence_transformer/` holds both encoders as one sentence-transformers model (its `Router` module):

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("<export>/sentence_transformer")
q = model.encode_query(["Where is Mary?"])        # E_s: the question alone, a state with no chunk yet
d = model.encode_document(["Mary went home."])   # E_a: one chunk (plain `encode` does the same)
scores = model.similarity(q, d)                   # dot product = the first step's Q-value without the position rotation
```

Each route is the backbone, the pooling, {"L2 normalisation, " if s["normalize"] else ""}and a bias-free Dense layer
holding pool_scale times the identity, so the vectors are the retriever's own, scale included; the
prefixes are the prompts `query` and `document`; a query is cut to {s["max_state_segment_tokens"]} tokens (one state
segment; the retriever refuses longer questions instead), a document to {s["max_chunk_tokens"]}. {same}

`query/` and `document/` are the two routes as sentence-transformers models of their own, giving the
same vectors: embed a corpus offline with one and serve questions online with the other.

```python
corpus = SentenceTransformer("<export>/document").encode(chunks)     # = encode_document above
questions = SentenceTransformer("<export>/query").encode(["Where is Mary?"])  # = encode_query above
```

Each folder's default prompt is its prefix, so plain `encode` embeds as the route does."""
        if st_missing is None
        else f"No `sentence_transformer/`, `query/` or `document/` folder: {st_missing}. {same} Embed questions with `state_encoder/` and "
        "chunks with `chunk_encoder/`, each pooled as below, or install the extra and export again."
    )
    return f"""# Q-RAG retriever encoders

Exported from the training run `{s["run"]}` (checkpoint `{s["checkpoint"]}`), base model `{s["base_model"]}`
({s["layers"]} layer{"" if s["layers"] == 1 else "s"}), trained on {s["task"]} with T = {s["max_steps"]} retrieval steps.

| folder | what |
|---|---|
| `state_encoder/` | E_s: embeds the state, i.e. the question followed by the chunks retrieved so far |
| `chunk_encoder/` | E_a: embeds one chunk |
| `sentence_transformer/` | both, as one sentence-transformers model (below), where the library was installed at export |
| `query/`, `document/` | E_s and E_a each as a sentence-transformers model of its own (below), with `sentence_transformer/` |
| `qrag_retriever.json` | the settings below, machine-readable |

Both are `transformers.AutoModel` folders with the tokenizer (for BERT-like models transformers warns
that the pooler's weights are missing: the retriever never uses the pooler). An embedding is
`{s["pool_scale"]:g} * {s["pooling"]}-pool(last hidden states)` over the non-padding tokens
({"L2-normalised before the scale" if s["normalize"] else "not normalised"}), dimension {s["dim"]}.
Prefixes: query `{s["query_prefix"]!r}`, chunk `{s["passage_prefix"]!r}`. Token caps: a chunk is cut to
{s["max_chunk_tokens"]} tokens with its special tokens; a state is `[CLS] question [SEP] chunk [SEP] ...`
with each segment cut to {s["max_state_segment_tokens"] - 2} tokens and the whole to {s["max_state_tokens"]}.

{st}

**Position rule.** The Q-value of chunk i in a state s is Q(s, i) = <E_s(s), R(p_i) E_a(chunk i)>,
where R(p) rotates the chunk embedding by its position code p (half-RoPE, DESIGN §3.3: each half of
the vector, of width d/2, rotated separately by the same code over interleaved pairs with the rotary
frequencies θ = 10000 at width d/2; code int(p / {pos["rope_interpolate_factor"]:g})). Position
codes: processor `{pos["processor"]}`, step size {pos["step_size"]}, formula `{pos["formula"]}` (relative:
the codes restart after every retrieved chunk, so they depend on what was retrieved before;
DESIGN §3); retrieved chunks enter the state {"in document order" if s["sort_by_index"] else "in retrieval order"}.

**What these folders cannot do alone.** They embed text. The retriever's multi-step behaviour is not
in them: the state that grows with every retrieved chunk (the question followed by the chunks
retrieved so far, re-embedded by E_s after each step), the relative positions that re-code every
chunk after each step, and the greedy or beam loop over steps live in the Q-RAG code
(`rl/tool/retriever.py`, `python retrieve.py run=...`). `encode_query` embeds the question alone,
i.e. only the first step's state. A single-step similarity search with these encoders ignores
positions, so it cannot tell the latest of two similar facts from an earlier one.
"""
