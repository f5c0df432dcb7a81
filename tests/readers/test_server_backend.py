"""Server backend against a local OpenAI-compatible endpoint (DESIGN §6.2 backend (a))."""

import pytest

from prompts_and_metrics.llm import GenerationError, build_backend
from prompts_and_metrics.llm.server_backend import resolve_api_key

MSG = [[{"role": "user", "content": f"q{i}"}] for i in range(6)]


def test_ok_order_payload_and_concurrency_cap(chat_server, monkeypatch):
    monkeypatch.setenv("QRAG_API_KEY", "secret-from-env")
    chat_server.answer_fn = lambda p: "echo " + p["messages"][-1]["content"]
    b = build_backend("server", "served-model", api_base_url=chat_server.url, max_at_same_time=2, timeout_s=5)
    out = b.generate(MSG, max_tokens=7, temperature=0.0, top_p=0.95, enable_thinking=False)
    assert out == [f"echo q{i}" for i in range(6)]
    r = chat_server.requests[0]
    assert r["path"] == "/v1/chat/completions" and r["model"] == "served-model" and r["max_tokens"] == 7
    assert r["chat_template_kwargs"] == {"enable_thinking": False}
    assert r["auth"] == "Bearer secret-from-env"
    assert chat_server.max_in_flight <= 2


def test_api_key_resolution(monkeypatch):
    monkeypatch.delenv("QRAG_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "oa")
    assert resolve_api_key(None) == "oa"
    assert resolve_api_key("cfg") == "cfg"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert resolve_api_key(None) == "EMPTY"


def test_http_error_raises_naming_server(chat_server):
    chat_server.mode = "error"
    b = build_backend("server", "m", api_base_url=chat_server.url, max_retries=1, backoff_s=0.01, timeout_s=5)
    with pytest.raises(GenerationError, match=r"127\.0\.0\.1.*2 attempts.*HTTP 500"):
        b.generate(MSG[:1], 4)
    assert len(chat_server.requests) == 2  # one try + one retry


def test_timeout_counted_not_empty(chat_server):
    chat_server.mode = "slow"
    b = build_backend("server", "m", api_base_url=chat_server.url, max_retries=0, timeout_s=0.2, on_failure="none")
    out = b.generate(MSG[:2], 4)
    assert out == [None, None] and b.failures == 2  # never a silent ''
    assert "timed out" in b.last_errors[0].lower() or "timeout" in b.last_errors[0].lower()


def test_retry_recovers(chat_server):
    chat_server.mode, chat_server.flaky_left = "flaky", 1
    b = build_backend(
        "server", "m", api_base_url=chat_server.url, max_retries=2, backoff_s=0.01, max_at_same_time=1, timeout_s=5
    )
    assert b.generate(MSG[:1], 4) == ["kitchen"]


def test_unreachable_server():
    b = build_backend("server", "m", api_base_url="http://127.0.0.1:9/v1", max_retries=0, timeout_s=1)
    with pytest.raises(GenerationError, match="127.0.0.1:9"):
        b.generate(MSG[:1], 4)
