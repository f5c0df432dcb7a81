"""Export a trained retriever's encoders as standard Hugging Face folders (docs/RETRIEVER_TOOL.md).

``<folder>/state_encoder`` and ``<folder>/chunk_encoder`` are ``save_pretrained`` folders of the
online state encoder E_s and chunk (action) encoder E_a, each with the tokenizer, loadable by
``transformers.AutoModel``; ``qrag_retriever.json`` holds what the backbones alone do not carry
(pooling, pool_scale, normalisation, prefixes, token caps, the rotary position rule) and
``README.md`` says it in prose, with what the folders cannot do alone. Where E_s and E_a hold the
same weights (an untrained run, or one whose encoders were never updated apart), the folder
``sentence_transformer`` is also written: the same backbone with the sentence-transformers module
files for its pooling, so that single-step similarity search works in toolkits that read them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

ST_VERSION = "3.0.0"  # the sentence-transformers folder layout written (modules.json + 1_Pooling)


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
        "query_prefix": qnet.query_prefix,
        "passage_prefix": qnet.passage_prefix,
        "max_chunk_tokens": int(qnet.layout.action_cap),
        "max_state_segment_tokens": int(qnet.eval_memory_content) + 2,
        "max_state_tokens": int(qnet.layout.state_cap),
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


def export_encoders(qnet: Any, cfg: DictConfig, checkpoint: Path, folder: Path) -> dict[str, Any]:
    """Write the folders; returns the settings written to ``qrag_retriever.json`` plus
    ``sentence_transformer`` (whether that folder was written)."""
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"export={folder}: the folder exists and is not empty; choose a new one")
    folder.parent.mkdir(parents=True, exist_ok=True)
    # written beside the target and renamed once complete: a kill leaves no half export at ``folder``
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.export-", dir=folder.parent))
    try:
        done = _write_export(qnet, cfg, checkpoint, work)
        if folder.exists():
            folder.rmdir()  # empty (checked above)
        work.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return done


def _write_export(qnet: Any, cfg: DictConfig, checkpoint: Path, folder: Path) -> dict[str, Any]:
    settings = settings_of(qnet, cfg, checkpoint)
    for name, enc in (("state_encoder", qnet.state_enc), ("chunk_encoder", qnet.action_enc)):
        enc.backbone.save_pretrained(folder / name)
        qnet.tokenizer.save_pretrained(folder / name)
    shared = same_weights(qnet.state_enc.backbone, qnet.action_enc.backbone)
    settings["shared_encoders"] = shared
    if shared:
        write_sentence_transformer(folder / "state_encoder", folder / "sentence_transformer", settings)
    (folder / "qrag_retriever.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(readme(settings), encoding="utf-8")
    return {**settings, "sentence_transformer": shared}


def write_sentence_transformer(hf_folder: Path, out: Path, s: dict[str, Any]) -> None:
    """A sentence-transformers folder over the backbone in ``hf_folder``: Transformer module at the
    root, Pooling in ``1_Pooling``, Normalize last when the retriever normalises. pool_scale has no
    module there (it scales every vector alike: rankings and cosines are unchanged)."""
    shutil.copytree(hf_folder, out)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if s["normalize"]:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (out / "2_Normalize").mkdir()
    pooling = {
        "word_embedding_dimension": s["dim"],
        "pooling_mode_cls_token": s["pooling"] == "cls",
        "pooling_mode_mean_tokens": s["pooling"] == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": s["pooling"] == "last",
        "include_prompt": True,
    }
    (out / "1_Pooling").mkdir()
    _json(out / "1_Pooling" / "config.json", pooling)
    _json(out / "modules.json", modules)
    _json(out / "sentence_bert_config.json", {"max_seq_length": s["max_chunk_tokens"], "do_lower_case": False})
    _json(
        out / "config_sentence_transformers.json",
        {
            "__version__": {"sentence_transformers": ST_VERSION},
            "prompts": {"query": s["query_prefix"], "document": s["passage_prefix"]},
            "default_prompt_name": None,
            "similarity_fn_name": "dot",
        },
    )


def _json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def readme(s: dict[str, Any]) -> str:
    pos = s["positions"]
    st = (
        "`sentence_transformer/` is the same backbone as a sentence-transformers folder (this run's state and "
        "chunk encoders hold identical weights): `SentenceTransformer(folder)` embeds as the retriever does, "
        "up to the constant factor pool_scale, with the prefixes as the prompts `query` and `document`."
        if s["shared_encoders"]
        else "No sentence-transformers folder: this run's state and chunk encoders hold different weights "
        "(Q-RAG trains them apart), so no one model embeds both questions and chunks. Embed questions with "
        "`state_encoder/` and chunks with `chunk_encoder/`, each pooled as below."
    )
    return f"""# Q-RAG retriever encoders

Exported from the training run `{s["run"]}` (checkpoint `{s["checkpoint"]}`), base model `{s["base_model"]}`
({s["layers"]} layer{"" if s["layers"] == 1 else "s"}), trained on {s["task"]} with T = {s["max_steps"]} retrieval steps.

| folder | what |
|---|---|
| `state_encoder/` | E_s: embeds the state, i.e. the question followed by the chunks retrieved so far |
| `chunk_encoder/` | E_a: embeds one chunk |
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
in them: the state that grows with every retrieved chunk, the relative positions that re-code every
chunk after each step, and the greedy or beam loop over steps live in the Q-RAG code
(`rl/run/retriever.py`, `python retrieve.py run=...`). A single-step similarity search with these
encoders ignores positions, so it cannot tell the latest of two similar facts from an earlier one.
"""
