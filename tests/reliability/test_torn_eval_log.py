"""A retriever log whose last line was torn by a killed evaluation (issue 36 item 12) is read
without that line, as training's metrics are; a malformed line elsewhere is still an error."""

from __future__ import annotations

import json

import pytest

from prompts_and_metrics.reader_io import LogFormatError, read_jsonl

REC = {"id": 1, "question": "q", "answer": "a", "sf_idx": [0], "pred_idx": [0], "sf_texts": ["s"], "pred_texts": ["s"]}


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path, capsys):
    log = tmp_path / "eval_seed42_nt1000.jsonl"
    log.write_text(json.dumps(REC) + "\n" + json.dumps({**REC, "id": 2})[:30])
    assert read_jsonl(log, REC) == [REC]
    assert f"{log}:2: skipped a half-written last line" in capsys.readouterr().err
    log.write_text(json.dumps(REC)[:30] + "\n" + json.dumps(REC) + "\n")  # damage that is not a torn end
    with pytest.raises(LogFormatError, match=r":1: not valid JSON"):
        read_jsonl(log)
    log.write_text(json.dumps(REC) + "\n{oops\n")  # a complete last line that is not JSON
    with pytest.raises(LogFormatError, match=r":2: not valid JSON"):
        read_jsonl(log)
