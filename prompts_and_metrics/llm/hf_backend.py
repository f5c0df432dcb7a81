"""transformers backend: batched greedy/sampled generation with left padding."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prompts_and_metrics.llm.base import GenerationError, Messages


class TransformersBackend:
    """``model``: a hub name, a local folder, or a ``.gguf`` file (loaded through transformers'
    GGUF support). ``dtype``: auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16, float16.
    ``num_threads``: torch intra-op threads (None: torch's default).
    ``max_model_len``: prompts longer than ``max_model_len - max_tokens`` raise GenerationError
    (None: no limit). Prompts are sorted by length inside each batch window to cut padding."""

    name = "transformers"

    def __init__(
        self,
        model: str,
        dtype: str = "auto",
        device: str | None = None,
        batch_size: int = 8,
        max_model_len: int | None = None,
        trust_remote_code: bool = False,  # True runs the model repository's Python code: opt in per run
        num_threads: int | None = None,
        **_ignored: Any,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if num_threads:
            # On a busy shared CPU, fewer intra-op threads avoid OpenMP spin contention.
            torch.set_num_threads(int(num_threads))

        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        path = Path(model)
        kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
        if path.suffix == ".gguf":
            if not path.is_file():
                raise FileNotFoundError(f"GGUF file not found: {path}")
            src, kwargs["gguf_file"] = str(path.parent), path.name
        else:
            src = model
        self.tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype, **kwargs).to(self.device)
        self.model.eval()
        self.batch_size = max(1, int(batch_size))
        self.max_model_len = max_model_len
        self.failures = 0

    def render(self, messages: Messages, enable_thinking: bool | None) -> str:
        extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)

    def count_tokens(self, messages: Messages, enable_thinking: bool | None = False) -> int:
        return len(self.tokenizer(self.render(messages, enable_thinking), add_special_tokens=False).input_ids)

    def ensure_context(self, n_tokens: int) -> None:
        """Raise ``max_model_len`` to at least ``n_tokens`` (a longer filter output needs more room)."""
        if self.max_model_len is not None and n_tokens > self.max_model_len:
            self.max_model_len = int(n_tokens)

    def generate(
        self,
        batch: Sequence[Messages],
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        enable_thinking: bool | None = False,
    ) -> list[str | None]:
        torch = self.torch
        texts = [self.render(m, enable_thinking) for m in batch]
        enc = [self.tokenizer(t, add_special_tokens=False).input_ids for t in texts]
        if self.max_model_len is not None:
            for k, ids in enumerate(enc):
                if len(ids) + max_tokens > self.max_model_len:
                    raise GenerationError(
                        f"transformers: prompt {k} has {len(ids)} tokens + {max_tokens} new tokens > "
                        f"max_model_len {self.max_model_len}"
                    )
        order = sorted(range(len(enc)), key=lambda k: len(enc[k]))
        out: list[str | None] = [None] * len(enc)
        gen_kwargs: dict[str, Any] = {"max_new_tokens": max_tokens, "pad_token_id": self.tokenizer.pad_token_id}
        if temperature and temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=temperature, top_p=top_p)
        else:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            padded = self.tokenizer.pad({"input_ids": [enc[k] for k in idx]}, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                gen = self.model.generate(**padded, **gen_kwargs)
            new = gen[:, padded["input_ids"].shape[1] :]
            for k, row in zip(idx, new):
                out[k] = self.tokenizer.decode(row, skip_special_tokens=True)
        return out
