"""experiments/niah/niah_eval_grid.py: the eval_retriever.py command of each cell (dry run), the skip of
finished cells, and the refusal of test files that differ from their manifest."""

import json
import shutil

from tests.conftest import load_script

grid = load_script("niah_eval_grid", "experiments/niah")
testsets = load_script("niah_testsets")


def test_dry_run_lists_each_unfinished_cell_longest_first(tmp_path, capsys):
    runs = tmp_path / "runs"
    done = runs / "n_s1" / "niah" / "niah_multiquery"
    done.mkdir(parents=True)
    (done / "eval_seed42_test4k.summary.json").write_text(json.dumps({"n": 100}))
    args = [str(runs), "n_s1", "n_noft", "--lengths", "4k", "--tasks", "niah_multiquery,niah_single_1"]
    assert grid.main([*args, "--dry-run", "device=cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3  # 2 runs x 2 tasks, less the finished cell
    first = lines[0].split()
    assert f"pretrained_path={runs / 'n_noft'}" in first and "envs.test_split=test4k" in first
    assert f"++envs.data_path={testsets.ROOT / 'niah_multiquery'}" in first and "num_samples=100" in first
    assert first[-1] == "device=cpu" and f"output_dir={runs / 'n_noft' / 'niah' / 'niah_multiquery'}" in first


def test_a_test_file_unlike_its_manifest_stops_the_grid(tmp_path, capsys):
    root = tmp_path / "sets"
    shutil.copytree(testsets.ROOT / "niah_single_1", root / "niah_single_1")
    manifest = json.loads((testsets.ROOT / "MANIFEST.json").read_text())
    for e in manifest["files"]:
        if e["file"] == "niah_single_1/test4k.jsonl.gz":
            e["sha256"] = "0" * 64
    (root / "MANIFEST.json").write_text(json.dumps(manifest))
    args = [str(tmp_path / "runs"), "n_s1", "--root", str(root), "--lengths", "4k", "--tasks", "niah_single_1"]
    assert grid.main([*args, "--dry-run"]) == 1
    assert "MISMATCH niah_single_1/test4k.jsonl.gz" in capsys.readouterr().err
