"""vLLM offline engine backend (``LLM.chat`` over the whole batch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prompts_and_metrics.llm.base import GenerationError, Messages


class VLLMBackend:
    """The engine is built lazily at the first ``generate`` so callers can raise ``max_model_len``
    first (``ensure_context``) once they know their longest prompt. ``data_parallel_size`` > 1 is
    passed to vLLM only when set (offline data parallelism needs a vLLM that supports it)."""

    name = "vllm"

    def __init__(
        self,
        model: str,
        tensor_parallel_size: int = 1,
        data_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = 2048,
        dtype: str = "bfloat16",
        quantization: str | None = None,
        trust_remote_code: bool = False,  # True runs the model repository's Python code: opt in per run
        enforce_eager: bool = False,
        seed: int = 0,
        **_ignored: Any,
    ):
        self.model = model
        self.trust_remote_code = bool(trust_remote_code)
        self.engine_kwargs: dict[str, Any] = dict(
            model=model,
            tensor_parallel_size=int(tensor_parallel_size),
            gpu_memory_utilization=float(gpu_memory_utilization),
            dtype=dtype,
            quantization=quantization,
            trust_remote_code=bool(trust_remote_code),
            enforce_eager=bool(enforce_eager),
            seed=int(seed),
        )
        if max_model_len is not None:
            self.engine_kwargs["max_model_len"] = int(max_model_len)
        if int(data_parallel_size) > 1:
            self.engine_kwargs["data_parallel_size"] = int(data_parallel_size)
        self._llm = None
        self._tokenizer = None
        self.failures = 0

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model, trust_remote_code=self.trust_remote_code)
        return self._tokenizer

    def count_tokens(self, messages: Messages, enable_thinking: bool | None = False) -> int:
        extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def ensure_context(self, n_tokens: int) -> None:
        """Raise ``max_model_len`` to at least ``n_tokens`` (only before the engine exists)."""
        cur = self.engine_kwargs.get("max_model_len")
        if cur is not None and n_tokens > cur:
            if self._llm is not None:
                raise GenerationError(f"vllm: engine already built with max_model_len {cur} < {n_tokens}")
            self.engine_kwargs["max_model_len"] = int(n_tokens)

    def _engine(self):
        if self._llm is None:
            from vllm import LLM

            self._llm = LLM(**self.engine_kwargs)
        return self._llm

    def close(self) -> None:
        """Shut the engine (and its worker processes) down now rather than at interpreter exit."""
        import gc

        llm, self._llm = self._llm, None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            try:
                core.shutdown()
            except Exception:  # best effort: the engine may already be gone
                pass
        del llm
        gc.collect()

    def generate(
        self,
        batch: Sequence[Messages],
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        enable_thinking: bool | None = False,
    ) -> list[str | None]:
        from vllm import SamplingParams

        if not batch:
            return []
        llm = self._engine()
        params = SamplingParams(
            max_tokens=int(max_tokens),
            temperature=float(temperature),
            top_p=float(top_p) if temperature and temperature > 0 else 1.0,
        )
        kwargs = {} if enable_thinking is None else {"chat_template_kwargs": {"enable_thinking": enable_thinking}}
        outputs = llm.chat([list(m) for m in batch], params, use_tqdm=False, **kwargs)
        return [o.outputs[0].text for o in outputs]
