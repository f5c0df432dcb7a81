"""Hand-injected wrong learners: each must make tests/rl/test_learner_step.py fail (docs/TESTING.md).

Applies one mutant at a time to the source, runs the learner case(s) that should catch it, restores
the file, and prints KILLED or SURVIVED. Usage: python tests/rl/learner_mutants.py [-k EXPR]
(EXPR replaces every mutant's own selection of cases).
"""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT, SFT = "default", "sft"
# (name, file, original text, wrong text, the cases that must catch it)
MUTANTS = [
    (  # the twin-head regression PQN, SARSA, SAC-D and DQN share (TwinHeadLearner.regress)
        "loss factor 2 dropped",
        "rl/learners/base.py",
        "loss = (0.5 * ((2 * q1 - g) ** 2).mean() + 0.5 * ((2 * q2 - g) ** 2).mean()) / self.k_accum",
        "loss = (0.5 * ((q1 - g) ** 2).mean() + 0.5 * ((q2 - g) ** 2).mean()) / self.k_accum",
        DEFAULT,
    ),
    (
        "chosen chunks not rotated by their position codes",
        "rl/model/qnetwork.py",
        "a_emb = self.rope(a_emb, to_device(np.asarray(codes, dtype=np.int64), self.device))",
        "pass",
        DEFAULT,
    ),
    (
        "lam read as gamma",
        "rl/learners/pqn.py",
        "self.hp.gamma, self.hp.lam, self.legacy_off_by_one)",
        "self.hp.gamma, self.hp.gamma, self.legacy_off_by_one)",
        DEFAULT,
    ),
    (
        "bootstrap set to zero",
        "rl/learners/acting.py",
        "boot = grid[L * E :]",
        "boot = torch.zeros_like(grid[L * E :])",
        DEFAULT,
    ),
    (
        "alpha not tied to lr",
        "rl/learners/acting.py",
        "return max(hp.alpha * lr / base_lr, hp.alpha_min)",
        "return max(hp.alpha, hp.alpha_min)",
        DEFAULT,
    ),
    (
        "EMA weight 1-tau",
        "rl/learners/pqn.py",
        "self.qnet.update_targets(ema_weight(self.hp))",
        "self.qnet.update_targets(1 - ema_weight(self.hp))",
        DEFAULT,
    ),
    (
        "top-k before availability mask",
        "rl/learners/pqn.py",
        "legacy_topk_before_mask=self.legacy_topk",
        "legacy_topk_before_mask=True",
        DEFAULT,
    ),
    (
        "lambda off by one (legacy recursion always)",
        "rl/learners/pqn.py",
        "self.hp.gamma, self.hp.lam, self.legacy_off_by_one)",
        "self.hp.gamma, self.hp.lam, True)",
        DEFAULT,
    ),
    (
        "lambda off by one (V_t for V_t+1)",
        "rl/learners/returns.py",
        "v_next = values[t + 1]",
        "v_next = values[t]",
        DEFAULT,
    ),
    (
        "SFT: targets not masked by availability",
        "rl/learners/sft.py",
        '(logits.masked_fill(~avail, float("-inf")), torch.tensor(gold',
        "(logits, torch.tensor(gold",
        SFT,
    ),
    (
        "legacy drop_last_transition ignored",
        "rl/learners/pqn.py",
        "if self.legacy_drop_last:",
        "if False:",
        "drop_last_transition",
    ),
    (
        "legacy dropout_in_targets ignored",
        "rl/learners/pqn.py",
        "self.target_train_mode = dropout_in_targets",
        "self.target_train_mode = False",
        "dropout_in_targets",
    ),
    ("soft_target ignored", "rl/learners/pqn.py", "soft=self.hp.soft_target,", "soft=True,", "no_soft_target"),
    (
        "use_target_networks ignored",
        "rl/learners/base.py",
        "return hp.tau if hp.use_target_networks else 1.0",
        "return hp.tau",
        "no_target_networks",
    ),
    (
        "alpha floor ignored",
        "rl/learners/acting.py",
        "return max(hp.alpha * lr / base_lr, hp.alpha_min)",
        "return hp.alpha * lr / base_lr",
        "alpha_floor",
    ),
    (
        "clipping skipped",
        "rl/learners/base.py",
        "grad_norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)",
        "grad_norm = torch.nn.utils.clip_grad_norm_(params, float('inf'))",
        DEFAULT,
    ),
]
override = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "-k" else None
survived = 0
for name, path, old, new, cases in MUTANTS:
    f = ROOT / path
    src = f.read_text()
    assert src.count(old) == 1, f"{path}: the text of mutant {name!r} is no longer there; update this script"
    f.write_text(src.replace(old, new))
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/rl/test_learner_step.py",
                "-k",
                override or cases,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    finally:
        f.write_text(src)
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    first_error = next((line for line in lines if line.startswith("E ")), "")
    survived += r.returncode == 0
    print(
        f"{'SURVIVED' if r.returncode == 0 else 'KILLED'}: {name}: {lines[-1] if lines else ''} {first_error}",
        flush=True,
    )
sys.exit(1 if survived else 0)
