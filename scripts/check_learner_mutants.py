"""Hand-injected learner mutants (issue 15): each must make tests/rl/test_learner_step.py fail."""
import subprocess, sys, pathlib
ROOT = pathlib.Path(__file__).resolve().parents[1]
MUTANTS = [
    ("loss factor 2 dropped", "rl/pqn.py",
     "loss = (0.5 * ((2 * q1 - g) ** 2).mean() + 0.5 * ((2 * q2 - g) ** 2).mean()) / self.k_accum",
     "loss = (0.5 * ((q1 - g) ** 2).mean() + 0.5 * ((q2 - g) ** 2).mean()) / self.k_accum"),
    ("bootstrap set to zero", "rl/pqn.py", "boot = values[L * E:]", "boot = torch.zeros_like(values[L * E:])"),
    ("alpha not tied to lr", "rl/pqn.py",
     'self.alpha = max(self.hp.alpha * scalars["lr"] / self.base_lr, self.hp.alpha_min)',
     'self.alpha = max(self.hp.alpha, self.hp.alpha_min)'),
    ("EMA weight 1-tau", "rl/pqn.py", "self.agent.update_targets(tau)", "self.agent.update_targets(1 - tau)"),
    ("top-k before availability mask", "rl/pqn.py", "legacy_topk_before_mask=self.legacy_topk",
     "legacy_topk_before_mask=True"),
    ("lambda off by one (legacy recursion always)", "rl/pqn.py",
     "self.hp.gamma, self.hp.lam, self.legacy_off_by_one)", "self.hp.gamma, self.hp.lam, True)"),
    ("lambda off by one (V_t for V_t+1)", "rl/returns.py", "v_next = values[t + 1]", "v_next = values[t]"),
    ("SFT: targets not masked by availability", "rl/sft.py",
     'logits = torch.stack(rows).masked_fill(~avail, float("-inf"))', "logits = torch.stack(rows)"),
    ("legacy drop_last_transition ignored", "rl/pqn.py", "if self.legacy_drop_last:", "if False:"),
    ("legacy dropout_in_targets ignored", "rl/pqn.py",
     'self.target_train_mode = flag(legacy, "dropout_in_targets")', "self.target_train_mode = False"),
    ("soft_target ignored", "rl/pqn.py", "soft=self.hp.soft_target,", "soft=True,"),
    ("use_target_networks ignored", "rl/pqn.py", "tau = self.hp.tau if self.hp.use_target_networks else 1.0",
     "tau = self.hp.tau"),
    ("alpha floor ignored", "rl/pqn.py",
     'self.alpha = max(self.hp.alpha * scalars["lr"] / self.base_lr, self.hp.alpha_min)',
     'self.alpha = self.hp.alpha * scalars["lr"] / self.base_lr'),
    ("clipping skipped", "rl/learner_base.py",
     "grad_norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)",
     "grad_norm = torch.nn.utils.clip_grad_norm_(params, float('inf'))"),
]
sel = sys.argv[1] if len(sys.argv) > 1 else "not legacy_ref"
for name, path, old, new in MUTANTS:
    f = ROOT / path
    src = f.read_text()
    assert src.count(old) == 1, (name, old)
    f.write_text(src.replace(old, new))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                            "tests/rl/test_learner_step.py", "-k", sel], cwd=ROOT, capture_output=True, text=True)
        last = [l for l in r.stdout.splitlines() if l.strip()][-1]
        fail = [l for l in r.stdout.splitlines() if l.startswith("E ")][:1]
        print(f"{'KILLED' if r.returncode else 'SURVIVED'}: {name}: {last} {fail}", flush=True)
    finally:
        f.write_text(src)
