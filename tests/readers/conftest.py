"""Shared fixtures for the reader tests: a local OpenAI-compatible server, a loaded SmolLM2, paths."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "readers"
LONGBENCH_FIXTURES = ROOT / "tests" / "fixtures" / "longbench"


def llm_feedback_cfg(**kw) -> dict:
    """configs/feedback/llm.yaml (the only defaults of these keys) with a test's changes, resolved
    as in a run."""
    from omegaconf import OmegaConf

    root = OmegaConf.merge({"feedback": OmegaConf.load(ROOT / "configs" / "feedback" / "llm.yaml")}, {"feedback": kw})
    return OmegaConf.to_container(root, resolve=True)["feedback"]


def load_script(name: str):
    """Import a repo-root entry script (not a package) by path, so tests work under bare `pytest`
    as well as `python -m pytest`."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def longbench_log_records(task: str, longbench_e: bool = False, reverse: bool = True) -> list[dict]:
    """The records eval_retriever.py writes for the LongBench fixture samples of ``task`` (every
    chunk retrieved, last first by default, so the reader's return to document order shows)."""
    from envs.data.longbench import load_longbench

    records = []
    for s in load_longbench(LONGBENCH_FIXTURES, task, longbench_e, 150):
        pred = list(range(len(s["chunks"])))[:: -1 if reverse else 1]
        records.append(
            {
                "id": s["id"],
                "question": s["question"],
                "answer": s["answer"],
                "sf_idx": [],
                "pred_idx": pred,
                "q_values": [0.5] * len(pred),
                "sf_texts": [],
                "pred_texts": [s["chunks"][j] for j in pred],
                "answer_aliases": s["answer_aliases"],
                "source": s["source"],
                "longbench": s["longbench"],
            }
        )
    return records


class FakeChatServer:
    """Minimal /v1/chat/completions. ``answer_fn(payload) -> str`` gives the reply; ``mode``:
    'ok', 'error' (HTTP 500), 'slow' (sleeps past the client timeout), 'flaky' (first N fail)."""

    def __init__(self, answer_fn=None):
        self.answer_fn = answer_fn or (lambda payload: "kitchen")
        self.mode = "ok"
        self.flaky_left = 0
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(n))
                with server.lock:
                    server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **payload})
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    fail = server.mode == "error" or (server.mode == "flaky" and server.flaky_left > 0)
                    if server.mode == "flaky" and server.flaky_left > 0:
                        server.flaky_left -= 1
                try:
                    if self.path != "/v1/chat/completions":
                        self.send_error(404)
                        return
                    if server.mode == "slow":
                        time.sleep(1.0)
                    else:
                        time.sleep(0.05)
                    if fail:
                        self.send_error(500, "boom")
                        return
                    body = json.dumps(
                        {"choices": [{"message": {"role": "assistant", "content": server.answer_fn(payload)}}]}
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server():
    srv = FakeChatServer()
    yield srv
    srv.close()


@pytest.fixture(scope="session")
def smollm2_backend():
    """SmolLM2-135M-Instruct (real weights) on the transformers backend, loaded once per session."""
    # Required, not skipped: a missing asset fails with the install command in the message.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from prompts_and_metrics.llm import build_backend

    # bf16 (fast on AVX512-BF16 CPUs) and one thread: robust on a busy 2-core machine.
    return build_backend("transformers", "smollm2", batch_size=8, dtype="bfloat16", num_threads=1)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
