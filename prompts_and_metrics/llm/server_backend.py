"""OpenAI-compatible chat-completions client (stdlib only: urllib + threads)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prompts_and_metrics.llm.base import GenerationError, Messages

API_KEY_ENV = ("QRAG_API_KEY", "OPENAI_API_KEY")


def resolve_api_key(api_key: str | None) -> str:
    """Config value, else $QRAG_API_KEY, else $OPENAI_API_KEY, else 'EMPTY' (what local vLLM servers
    accept when started without --api-key)."""
    if api_key:
        return str(api_key)
    for var in API_KEY_ENV:
        if os.environ.get(var):
            return os.environ[var]
    return "EMPTY"


def refuse_key_argument(argv: Sequence[str]) -> None:
    """A key on the command line shows in ``ps`` and the shell history: the reader scripts take
    it from the environment only."""
    if any(a == "--api_key" or a.startswith("--api_key=") for a in argv):
        raise SystemExit(
            f"error: --api_key is not accepted (a key on the command line is visible in ps and the "
            f"shell history); export {API_KEY_ENV[0]}=<key> instead"
        )


class ServerBackend:
    """POSTs ``{api_base_url}/chat/completions``; at most ``max_at_same_time`` requests in flight.

    Each request gets ``timeout_s``; failures (connection errors, HTTP errors, timeouts, malformed
    replies) are retried ``max_retries`` times with exponential backoff (``backoff_s`` · 2^k). A
    request that still fails raises GenerationError naming the server and the request index
    (``on_failure='raise'``) or comes back as None and increments ``failures`` (``'none'``). Never
    an empty string in place of a failure."""

    name = "server"

    def __init__(
        self,
        model: str,
        api_base_url: str = "http://localhost:10001/v1",
        api_key: str | None = None,
        max_at_same_time: int = 20,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        on_failure: str = "raise",
        **_ignored: Any,
    ):
        if on_failure not in ("raise", "none"):
            raise ValueError(f"on_failure must be 'raise' or 'none', got {on_failure!r}")
        self.model = model
        self.url = api_base_url.rstrip("/") + "/chat/completions"
        self.api_key = resolve_api_key(api_key)
        self.max_at_same_time = max(1, int(max_at_same_time))
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = float(backoff_s)
        self.on_failure = on_failure
        self.failures = 0
        self.last_errors: list[str] = []

    def _post(self, payload: dict) -> str:
        req = urllib.request.Request(
            self.url,
            data=json.dumps(payload).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
        )
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            body = json.loads(resp.read().decode("utf-8"))
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"malformed reply (no choices[0].message.content): {str(body)[:200]}") from exc
        return content if content is not None else ""

    def _one(self, k: int, payload: dict) -> tuple[str | None, str | None]:
        err = ""
        for attempt in range(self.max_retries + 1):
            try:
                return self._post(payload), None
            except urllib.error.HTTPError as exc:
                err = f"HTTP {exc.code}: {exc.read()[:200]!r}"
            except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
                err = f"{type(exc).__name__}: {exc}"
            if attempt < self.max_retries:
                time.sleep(self.backoff_s * (2**attempt))
        return None, f"request {k} to {self.url} failed after {self.max_retries + 1} attempts ({err})"

    def generate(
        self,
        batch: Sequence[Messages],
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        enable_thinking: bool | None = False,
    ) -> list[str | None]:
        payloads = []
        for messages in batch:
            p: dict[str, Any] = {
                "model": self.model,
                "messages": list(messages),
                "max_tokens": int(max_tokens),
                "temperature": float(temperature),
                "top_p": float(top_p),
            }
            if enable_thinking is not None:
                p["chat_template_kwargs"] = {"enable_thinking": bool(enable_thinking)}
            payloads.append(p)
        with ThreadPoolExecutor(max_workers=min(self.max_at_same_time, max(1, len(payloads)))) as pool:
            results = list(pool.map(lambda kp: self._one(*kp), enumerate(payloads)))
        self.last_errors = [e for _, e in results if e]
        if self.last_errors:
            if self.on_failure == "raise":
                raise GenerationError(
                    "; ".join(self.last_errors[:3])
                    + (f" (+{len(self.last_errors) - 3} more)" if len(self.last_errors) > 3 else "")
                )
            self.failures += len(self.last_errors)
        return [text for text, _ in results]
