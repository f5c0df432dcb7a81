"""scripts/lease.sh on the CPU. End to end (slow): setup copies the tree out with .code_version, start
trains a plan side by side, eval evaluates it, pack brings back one archive without checkpoints, and
scripts/seed_report.py reads that archive; the runs record the commit given at setup. Every verb and
setting on a small repository with a stand-in trainer and evaluator and a fake nvidia-smi (seconds):
plans into their own folders, weights cut by scripts/device_parts.py joined from parts carried in three
calls (setup, parts, start; start refused before the last) and the hand-made parts of rounds 5-8, a
second tree, background jobs that eval leaves running, training that eval stops, a split archive, call
lines. Real MiniLM in parts: test_weights_travel_in_parts."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import ROOT, TINY, load_script


@pytest.mark.slow
def test_a_lease_on_the_cpu(tmp_path: Path) -> None:
    common = [o for o in TINY if not o.startswith("logger.")]
    plan = tmp_path / "plan_train.txt"
    plan.write_text(
        f"#@common {' '.join(common)}\nw1_a_s1 0 seed=1\nw1_b_s1 0 seed=1 algo.pqn.hyperparams.alpha=0.02\n"
    )
    evals = tmp_path / "plan_eval.txt"
    evals.write_text("#@length_unit sentences\nw1_a_s1 0 3 8\nw1_b_s1 0 3 8\n")
    settings = tmp_path / "lease.env"
    settings.write_text(f"RUNS=runs/t\nTRAIN_PLANS={plan}\nEVAL_PLANS={evals}\nTIME_LIMIT=300\nMPS=0\n")
    code, out = tmp_path / "code", tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "CODE": str(code),
        "OUT": str(out),
        "PYTHON": sys.executable,
        "SITE": str(tmp_path / "site"),
        "FIRST_LOOK": "1",
        "POLL": "2",
        "COMMIT": "abc1234",
    }

    def lease(*verb: str) -> str:
        done = subprocess.run(
            ["bash", str(ROOT / "scripts" / "lease.sh"), str(settings), *verb],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    lease("setup")
    assert (code / ".code_version").read_text().strip() == "abc1234" and (code / "train_q_rag.py").is_file()
    assert not (code / ".venv").exists() and not (code / ".git").exists()
    lease("start", "240")  # returns once nothing trains any more
    for name in ("w1_a_s1", "w1_b_s1"):
        assert (code / "runs" / "t" / name / "summary.json").is_file(), name
    lease("eval", "300")
    lease("pack")
    with tarfile.open(out / "round.tgz") as tar:
        names = tar.getnames()
        summary = json.loads(tar.extractfile("runs/t/w1_a_s1/eval_seed42_ns8.summary.json").read())
    assert not [n for n in names if n.endswith(".pt")] and "runs/t/w1_b_s1/metrics.jsonl" in names
    assert summary["n"] == 3 and summary["checkpoint"]["code_version"] == "abc1234"
    assert summary["checkpoint"]["step"] is not None
    report = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "seed_report.py"), str(out / "round.tgz")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0 and "| a | 1 |" in report.stdout and "| b | 1 |" in report.stdout


def test_setup_needs_the_commit(tmp_path: Path) -> None:
    settings = tmp_path / "lease.env"
    settings.write_text("RUNS=runs/t\nTRAIN_PLANS=x\nEVAL_PLANS=y\nMPS=0\n")
    env = {k: v for k, v in os.environ.items() if k != "COMMIT"} | {"CODE": str(tmp_path / "code")}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "lease.sh"), str(settings), "setup"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "COMMIT=" in done.stderr and not (tmp_path / "code").exists()


# the stand-ins launch_plan.sh / launch_evals.sh start as "$PYTHON $CODE/train_q_rag.py" / "eval_retriever.py"
FAKE_TRAIN = """import json, os, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
out = args["hydra.run.dir"]
os.makedirs(out, exist_ok=True)
open(os.path.join(out, "config.yaml"), "w").write("\\n".join(sys.argv[1:]) + "\\n")
open(os.path.join(out, "model_best.pt"), "w").write("weights")
time.sleep(float(args.get("hang", 0)))
summary = {"gpu": os.environ["CUDA_VISIBLE_DEVICES"], "model": args.get("algo.model.name"), "extra": args.get("extra")}
open(os.path.join(out, "summary.json"), "w").write(json.dumps(summary))
"""
FAKE_EVAL = """import json, os, sys
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
name = f"eval_seed42_nt{args['envs.num_tokens']}.summary.json"
open(os.path.join(args["pretrained_path"], name), "w").write(json.dumps({"n": int(args["num_samples"])}))
"""
FAKE_SMI = """#!/usr/bin/env bash
case "$*" in
  *query-gpu=index\\ *|*query-gpu=index) printf '0\\n1\\n' ;;
  *) echo "0, Fake GPU, 0 %, 0 MiB" ;;
esac
"""
SETTINGS = """# a lease of two plans into two folders, with jobs and calls
RUNS=runs/t
TRAIN_PLANS="plans/train_a.txt plans/train_b.txt:runs/other"
EVAL_PLANS="plans/eval_a.txt
  plans/eval_b.txt:runs/other"
TIME_LIMIT=100
MPS=0
OLD_TREE=abc1234
EXTRA="extra=yes"
MY_SETTING=exported
JOBS_SETUP=('echo "setup job in $PWD at $(cat .code_version)"')
JOBS_START=('sleep 4; echo done > start_job_done')
JOBS_EVAL=('sleep 3; echo "eval job sees $RUNS"')
CALL_probe=(
  'echo "lines see $COMMIT $OLD_TREE $(cat $OLD/.code_version) $MY_SETTING in $PWD"'
  'exit 3'
  'echo "a failed line does not stop the next" > $OUT/after.txt'
)
CALL_slow=('sleep 30' 'echo never')
"""


def test_every_verb_and_setting_in_seconds(tmp_path: Path) -> None:
    repo, code, old, out = tmp_path / "repo", tmp_path / "code", tmp_path / "old", tmp_path / "out"
    (repo / "scripts").mkdir(parents=True)
    for name in ("lease.sh", "launch_plan.sh", "launch_evals.sh", "python.sh"):
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    (repo / "train_q_rag.py").write_text(FAKE_TRAIN)
    (repo / "eval_retriever.py").write_text(FAKE_EVAL)
    (repo / "plans").mkdir()
    (repo / "plans" / "train_a.txt").write_text("#@common x=1\nr1 0 seed=1\nr2 1 seed=2 hang=60\n")
    (repo / "plans" / "train_b.txt").write_text("n1 1 seed=3\n")
    (repo / "plans" / "eval_a.txt").write_text("r1 0 3 1000\n")
    (repo / "plans" / "eval_b.txt").write_text("n1 0 2 1000,2000\n")
    (repo / "lease.env").write_text(SETTINGS)
    # stand-in MiniLM weights in three parts as the next lease makes them (one call each), and a second
    # tree as `git archive --prefix=old/`
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    save_file({"w": torch.randn(400)}, str(model / "model.safetensors"))
    weight_parts = load_script("device_parts").make_parts(model, "minilm", tmp_path / "carried", 400)
    assert len(weight_parts) == 3
    (repo / ".device").mkdir()

    def carry(*folders: Path) -> None:
        """The next call's tree carries these part folders only (.device/ is not tracked)."""
        for old_part in (repo / ".device").glob("part*"):
            shutil.rmtree(old_part)
        for f in folders:
            shutil.copytree(f, repo / ".device" / f.name)

    (tmp_path / "old_src" / "old").mkdir(parents=True)
    (tmp_path / "old_src" / "old" / "train_q_rag.py").write_text("# the old tree")
    with tarfile.open(repo / ".device" / "old_abc1234.tgz", "w:gz") as tar:
        tar.add(tmp_path / "old_src" / "old", arcname="old")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755 | stat.S_IXUSR)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CODE": str(code),
        "OLD": str(old),
        "OUT": str(out),
        "PYTHON": sys.executable,
        "SITE": str(tmp_path / "site"),
        "FIRST_LOOK": "1",
        "POLL": "1",
    }
    env.pop("COMMIT", None)

    def lease(*verb: str, rc: int = 0, **extra: str) -> str:
        done = subprocess.run(
            ["bash", str(repo / "scripts" / "lease.sh"), "lease.env", *verb],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == rc, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout + done.stderr

    def wait_for(path: Path) -> str:
        for _ in range(50):
            if path.is_file() and path.read_text():
                return path.read_text()
            time.sleep(0.1)
        raise AssertionError(f"{path} never written")

    carry(weight_parts[0])
    said = lease("setup", COMMIT="abc9999")
    assert (code / ".code_version").read_text() == "abc9999\n" and (code / "train_q_rag.py").is_file()
    assert (old / ".code_version").read_text() == "abc1234\n" and (old / "train_q_rag.py").is_file()
    assert "weights minilm: 1 of 3 parts here" in said
    assert wait_for(code / "runs" / "t" / "logs" / "job_setup_1.log") == f"setup job in {code} at abc9999\n"
    assert (code / "runs" / "other" / "logs").is_dir()

    carry()
    assert "error: weights minilm incomplete" in lease("start", "12", rc=1)
    assert not (code / "runs" / "t" / "r1").exists()
    carry(weight_parts[1])
    assert "weights minilm: 2 of 3 parts here" in lease("parts")
    carry(weight_parts[2])
    assert "weights minilm: joined" in lease("start", "12")
    joined = code / ".device" / "minilm"
    fp16 = load_file(str(joined / "model.safetensors"))["w"]
    assert fp16.dtype == torch.float16 and torch.equal(fp16, load_file(str(model / "model.safetensors"))["w"].half())
    assert (joined / "config.json").is_file() and not list(joined.glob("model.safetensors.part-*"))
    r1 = json.loads((code / "runs" / "t" / "r1" / "summary.json").read_text())
    n1 = json.loads((code / "runs" / "other" / "n1" / "summary.json").read_text())
    assert r1 == {"gpu": "0", "model": ".device/minilm", "extra": "yes"} and n1["gpu"] == "1"
    assert not (code / "runs" / "t" / "r2" / "summary.json").exists()  # still training (hang=60)

    said = lease("eval", "20")
    assert not (code / "runs" / "t" / "r2" / "summary.json").exists()  # stopped by eval, not finished
    assert (code / "start_job_done").read_text() == "done\n"  # the start job was left to finish
    assert json.loads((code / "runs" / "t" / "r1" / "eval_seed42_nt1000.summary.json").read_text()) == {"n": 3}
    for n in (1000, 2000):
        assert (code / "runs" / "other" / "n1" / f"eval_seed42_nt{n}.summary.json").is_file()
    # eval watched its job to the end (the jobs count as running work)
    assert (code / "runs" / "t" / "logs" / "job_eval_1.log").read_text() == "eval job sees runs/t\n"

    (code / "runs" / "other" / "n1" / "big.bin").write_bytes(os.urandom(16 * 1024 * 1024))  # no gzip shrinks it
    lease("pack")
    parts = sorted(out.glob("round.tgz.part-*"))
    assert len(parts) == 2 and not (out / "round.tgz").exists() and parts[0].stat().st_size == 15 * 1024 * 1024
    (tmp_path / "joined.tgz").write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(tmp_path / "joined.tgz") as tar:
        names = tar.getnames()
    assert "runs/t/r1/summary.json" in names and "runs/other/n1/eval_seed42_nt2000.summary.json" in names
    assert "runs/other/n1/big.bin" in names and not [n for n in names if n.endswith(".pt")]

    said = lease("call", "probe", "30", rc=3)
    assert f"lines see abc9999 abc1234 abc1234 exported in {code}" in said and "call probe: rc=3: exit 3" in said
    assert (out / "after.txt").is_file()
    t0 = time.monotonic()
    said = lease("call", "slow", "2", rc=1)
    assert time.monotonic() - t0 < 10 and "no time left for: echo never" in said and said.count("never") == 1
    assert "no CALL_nope lines" in lease("call", "nope", rc=2)
    assert "unknown verb nope (setup|start|watch|eval|pack|parts|call)" in lease("nope", rc=2)

    # rounds 5-8 carried hand-made parts without MODEL (`split -b 22M`): they join into minilm
    hand = [repo / ".device" / "part1", repo / ".device" / "part2"]
    carry()
    for k, piece in enumerate((b"first half ", b"second half")):
        hand[k].mkdir()
        (hand[k] / "PARTS").write_text("2\n")
        (hand[k] / f"model.safetensors.part-a{'ab'[k]}").write_bytes(piece)
    lease("parts", CODE=str(tmp_path / "code2"))
    assert (tmp_path / "code2" / ".device" / "minilm" / "model.safetensors").read_bytes() == b"first half second half"


def test_weights_travel_in_parts(tmp_path: Path) -> None:
    """scripts/device_parts.py cuts a model's fp16 weights into parts (real MiniLM here); lease.sh takes
    the parts each call carries into $CODE/.device/<name>, joins them once all came and checks their
    sha256, start refuses while a carried model is incomplete, and a corrupted piece is refused."""
    from rl.model.embedder import Embedder, load_backbone, resolve_model_path
    from rl.model.model_keys import ModelKeys

    device_parts = load_script("device_parts")
    src = tmp_path / "src"
    (src / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "lease.sh", src / "scripts" / "lease.sh")
    settings = src / "lease.env"
    settings.write_text("RUNS=runs/t\nTRAIN_PLANS=x\nEVAL_PLANS=y\nMPS=0\n")
    minilm = Path(resolve_model_path("offline:minilm"))
    folders = device_parts.make_parts(minilm, "mini", tmp_path / "parts", 20 * device_parts.MiB)
    assert len(folders) == 3 and (folders[0] / "tokenizer.json").is_file()
    assert all((f / "PARTS").read_text() == "3\n" and (f / "MODEL").read_text() == "mini\n" for f in folders)

    def call(verb: str, *carried: Path, code: Path = tmp_path / "code") -> subprocess.CompletedProcess:
        """One device call: the tree carries these part folders only."""
        shutil.rmtree(src / ".device", ignore_errors=True)
        (src / ".device").mkdir()
        for f in carried:
            shutil.copytree(f, src / ".device" / f.name)
        env = {**os.environ, "CODE": str(code), "OUT": str(tmp_path), "SITE": str(tmp_path / "site")}
        cmd = ["bash", str(src / "scripts" / "lease.sh"), str(settings), verb]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)

    first = call("parts", folders[0])
    assert first.returncode == 0 and "weights mini: 1 of 3 parts here" in first.stdout
    early = call("start")
    assert early.returncode == 1 and "error: weights mini incomplete" in early.stderr
    done = call("parts", *folders[1:])
    assert done.returncode == 0 and "weights mini: joined" in done.stdout, done.stderr
    joined = tmp_path / "code" / ".device" / "mini"
    want = (folders[0] / "model.safetensors.sha256").read_text().split()[0]
    assert device_parts.sha256_of(joined / "model.safetensors") == want
    assert not list(joined.glob("model.safetensors.part-*"))
    # the joined fp16 weights are MiniLM's within fp16 rounding
    ids, mask = torch.tensor([[101, 2000, 2003, 102]]), torch.ones(1, 4, dtype=torch.long)
    with torch.no_grad():
        e16 = Embedder(load_backbone(ModelKeys(name=str(joined)))).eval()(ids, mask)
        e32 = Embedder(load_backbone(ModelKeys(name="offline:minilm"))).eval()(ids, mask)
    torch.testing.assert_close(e16, e32, atol=2e-3, rtol=0)
    assert not torch.equal(e16, e32)
    # a piece changed on the way: refused, nothing joined
    bad = tmp_path / "bad" / folders[1].name
    shutil.copytree(folders[1], bad)
    piece = next(bad.glob("model.safetensors.part-*"))
    data = bytearray(piece.read_bytes())
    data[1000] ^= 1
    piece.write_bytes(bytes(data))
    wrong = call("parts", folders[0], bad, folders[2], code=tmp_path / "code2")
    assert wrong.returncode == 1 and "the joined file's sha256 is not the one its parts carry" in wrong.stderr
    assert not (tmp_path / "code2" / ".device" / "mini" / "model.safetensors").exists()
