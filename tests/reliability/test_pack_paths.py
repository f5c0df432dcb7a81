"""Absolute machine paths in committed result files (issue 36 item 14): scripts/pack_round.py makes
the producing machine's paths relative, refuses one it cannot place, and the committed rounds hold none."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, load_script


def _run(folder, model: str, data_path: str):
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"algo:\n  model:\n    name: {model}\nenvs:\n  data_path: {data_path}\n")
    (folder / "metrics.jsonl").write_text('{"step": 0}\n')
    summary = {"run": str(folder), "model": model, "data_path": data_path}
    (folder / "eval_seed42_nt1000.summary.json").write_text(json.dumps(summary))
    (folder / "eval_seed42_nt1000.jsonl").write_text('{"index": 0}\n')


def test_paths_of_the_producing_machine_become_relative(tmp_path):
    pack = load_script("pack_round")
    raw = tmp_path / "raw"
    _run(raw / "t_qa1", "/srv/ckout/.device/minilm", "/srv/ckout/data/babilong/qa1_train.txt")
    dest = tmp_path / "dest"
    pack.main([str(raw), str(dest), "--root", "/srv/ckout", "--rewrite", f"{raw}=runs"])
    summary = json.loads((dest / "t_qa1" / "eval_seed42_nt1000.summary.json").read_text())
    assert summary == {"run": "runs/t_qa1", "model": ".device/minilm", "data_path": "data/babilong/qa1_train.txt"}
    assert "name: .device/minilm" in (dest / "t_qa1" / "config.yaml").read_text()


def test_an_absolute_path_left_is_refused_before_anything_is_written(tmp_path):
    pack = load_script("pack_round")
    raw = tmp_path / "raw"
    _run(raw / "t_qa1", "/srv/ckout/.device/minilm", "data/x.txt")
    with pytest.raises(SystemExit, match=r"holds the absolute path /srv/ckout/\.device/minilm"):
        pack.main([str(raw), str(tmp_path / "dest"), "--rewrite", f"{raw}=runs"])
    assert not (tmp_path / "dest").exists()


def test_committed_result_files_hold_no_absolute_path(committed_runs):
    """The rounds' text files and the files inside their raw archives (experiments/<round>/runs.tar.xz)."""
    pack = load_script("pack_round")
    found = {}
    trees = {"experiments": ROOT / "experiments"} | {f"{r}/runs.tar.xz": d for r, d in committed_runs.items()}
    for name, tree in trees.items():
        for f in tree.rglob("*"):
            if f.is_file() and (
                f.suffix in (".yaml", ".json") or f.name in ("metrics.jsonl", "curves.md", "summary.txt")
            ):
                for path in pack.absolute_paths(f.read_text(encoding="utf-8")):
                    found.setdefault(f"{name}: {f.relative_to(tree)}", path)
    assert not found, list(found.items())[:5]
