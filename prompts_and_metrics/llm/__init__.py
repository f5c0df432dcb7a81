"""One generation layer for the reader scripts and the LLM reward (ARCHITECTURE: shared code lives
in one place). ``generate(batch_of_chat_message_lists, ...) -> list[str]`` on every backend:

* ``vllm``         offline vLLM engine (imported only when built)
* ``transformers`` ``AutoModelForCausalLM.generate`` with left-padded batches (folder or .gguf)
* ``server``       OpenAI-compatible ``/chat/completions`` over HTTP (stdlib urllib, threads)

Nothing heavy is imported here: the backend modules import torch/vllm lazily.
"""

from __future__ import annotations

from prompts_and_metrics.llm.base import Backend, GenerationError
from prompts_and_metrics.llm.factory import build_backend, resolve_model

__all__ = ["Backend", "GenerationError", "build_backend", "resolve_model"]
