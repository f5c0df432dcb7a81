"""Backend interface and factory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

Messages = list[dict[str, str]]

BACKENDS = ("vllm", "transformers", "server")


class GenerationError(RuntimeError):
    """A generation request failed for good (after retries). The message names the backend/server
    and the request."""


class Backend(Protocol):
    name: str
    failures: int  # requests that failed for good and came back as None (on_failure='none')

    def generate(
        self,
        batch: Sequence[Messages],
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        enable_thinking: bool | None = False,
    ) -> list[str | None]:
        """One output text per message list, in input order. ``enable_thinking`` is passed to the
        chat template (Qwen3's switch; other templates ignore it); None passes nothing."""
        ...
