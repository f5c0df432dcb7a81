"""retrieve.py (the command) and the export of the encoders as Hugging Face folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from rl.model.embedder import Embedder
from rl.tool.retriever import QRAGRetriever, RetrieverError
from tests.conftest import ROOT

from .conftest import eval_cfg

TEXT = "John went to the garden. Mary moved to the kitchen.\nThe sky is blue. Sandra journeyed to the office.\n"


def cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "retrieve.py"), "device=cpu", "progress_bar=false", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_cli_prints_and_writes_jsonl(tiny_run: Path, tmp_path: Path) -> None:
    text = tmp_path / "book.txt"
    text.write_text(TEXT, encoding="utf-8")
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "Where is Mary?", "id": "a"}\n\n{"question": "Where is John?", "id": "b"}\n')
    out = tmp_path / "answers.jsonl"
    done = cli(f"run={tiny_run}", f"text={text}", f"questions={questions}", f"output={out}", "steps=3")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    api = QRAGRetriever.from_run(tiny_run, device="cpu").retrieve_batch(
        ["Where is Mary?", "Where is John?"], TEXT, steps=3
    )
    assert [r["id"] for r in rows] == ["a", "b"]
    assert [r["picks"] for r in rows] == [r.to_dict()["picks"] for r in api]
    assert all(TEXT[p["start"] : p["end"]] == p["chunk"] for r in rows for p in r["picks"])
    shown = cli(f"run={tiny_run}", f"text={text}", "question=Where is Mary?", "steps=2")
    assert shown.returncode == 0, shown.stderr
    first = api[0].picks[0]
    assert f"step 1  Q={first.q_value:.4f}  [chunk {first.index}, chars {first.start}-{first.end}]  {first.chunk}" in (
        shown.stdout
    )
    assert list(ROOT.glob("retrieve.log")) == [] and not (tiny_run / ".hydra").exists()  # nothing written around


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run=/nonexistent/run", "question=x", "text=/dev/null"], "error: run=/nonexistent/run: no such folder"),
        (["question=x", "text=/dev/null"], "error: run= is required"),
        (["RUN", "question=x", "text=EMPTY"], "error: text=EMPTY: the text is empty: there is nothing to retrieve"),
        (["RUN", "question=x", "text=/nonexistent.txt"], "error: text=/nonexistent.txt: no such file"),
        (["RUN", "text=BOOK"], 'error: pass either question="..." or questions=<file>'),
    ],
)
def test_cli_bad_input_is_one_error_line(tiny_run: Path, tmp_path: Path, args, message) -> None:
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "book.txt").write_text(TEXT)
    subs = {
        "RUN": f"run={tiny_run}",
        "text=EMPTY": f"text={tmp_path / 'empty.txt'}",
        "text=BOOK": f"text={tmp_path / 'book.txt'}",
    }
    done = cli(*[subs.get(a, a) for a in args])
    assert done.returncode == 2
    errors = [x for x in done.stderr.splitlines() if x.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith(message.replace("text=EMPTY", subs["text=EMPTY"])), done.stderr
    assert "[retrieve]" not in done.stderr  # refused before the model is loaded (the question cap: test_api.py)
    assert "Traceback" not in done.stderr


def test_export_reloads_with_transformers_to_identical_embeddings(tiny_run: Path, tmp_path: Path) -> None:
    r = QRAGRetriever.from_eval_config(eval_cfg(tiny_run))
    done = r.export(tmp_path / "exp")
    assert done["shared_encoders"]  # an untrained run: state and chunk encoders are one set of weights
    settings = json.loads((tmp_path / "exp" / "qrag_retriever.json").read_text())
    texts = ["Where is Mary?", "Mary moved to the kitchen after she had been to the garden."]
    for name, enc in (("state_encoder", r.qnet.state_enc), ("chunk_encoder", r.qnet.action_enc)):
        folder = tmp_path / "exp" / name
        tok = AutoTokenizer.from_pretrained(folder)
        batch = tok(texts, padding=True, return_tensors="pt")
        assert (
            batch["input_ids"].tolist()
            == r.qnet.inputs.tokenizer(texts, padding=True, return_tensors="pt")["input_ids"].tolist()
        )
        model = AutoModel.from_pretrained(folder).eval()
        reloaded = Embedder(model, settings["pooling"], settings["pool_scale"], settings["normalize"]).eval()
        enc.eval()
        with torch.no_grad():
            want = enc(batch["input_ids"], batch["attention_mask"])
            got = reloaded(batch["input_ids"], batch["attention_mask"])
            # the pooling written down, applied by hand to the plain transformers output
            h = model(**batch).last_hidden_state
            m = batch["attention_mask"].unsqueeze(-1).float()
            by_hand = settings["pool_scale"] * (h * m).sum(1) / m.sum(1)
        assert torch.equal(got, want)
        assert torch.allclose(by_hand, want, atol=0, rtol=1e-6)
    readme = (tmp_path / "exp" / "README.md").read_text()
    assert str(tiny_run) in readme and "cannot do alone" in readme and "mean-pool" in readme


def test_export_without_sentence_transformers_says_so(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("sentence_transformers", "sentence_transformers.sentence_transformer.modules"):
        monkeypatch.setitem(sys.modules, name, None)  # as if the extra `st` were not installed
    r = QRAGRetriever.from_eval_config(eval_cfg(tiny_run))
    done = r.export(tmp_path / "exp")
    assert not done["sentence_transformer"] and not (tmp_path / "exp" / "sentence_transformer").exists()
    assert (tmp_path / "exp" / "state_encoder" / "config.json").exists()
    assert (
        "No `sentence_transformer/`, `query/` or `document/` folder: sentence-transformers >= 6.2 is not installed"
        in (tmp_path / "exp" / "README.md").read_text()
    )
    with pytest.raises(RetrieverError, match="not empty"):
        r.export(tmp_path / "exp")
