"""Training run: ``run(cfg) -> metrics`` (the Hydra entry point is train_q_rag.py).

Run folder (DESIGN §8.1): config.yaml (unresolved, for eval merging), config_resolved.yaml,
.hydra/, tb_logs/, model_last.pt, model_best.pt, metrics.jsonl, summary.json.

Data parallel under torchrun / accelerate launch (docs/DISTRIBUTED.md): every rank acts in its
own environments and gradients are averaged in PQNLearner.optimizer_step; rank 0 alone writes the
run folder and evaluates while the others wait at a barrier.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from envs.data.registry import build_dataset
from envs.feedback import build_feedback
from envs.legacy import Legacy
from envs.seeding import derive_rng
from rl import distributed as dist
from rl.eval.greedy import greedy_episodes, summarize
from rl.model.precision import Precision
from rl.run.build import build_learner, eval_settings, qnet_from_cfg, train_env
from rl.run.checkpoints import eval_weights, load_eval_weights, prune_sweep_checkpoints
from rl.run.config import (
    code_version,
    config_differences,
    hydra_output_dir,
    rng_state,
    seed_everything,
    set_rng_state,
    upgrade_run_config,
    without_hydra,
)
from rl.run.progress import progress
from rl.run.validate import check_training
from runstore import (
    CheckpointLoadError,
    FolderLock,
    NotWritableError,
    append_line,
    atomic_write_text,
    load_checkpoint,
    not_writable_message,
    read_jsonl_rows,
    remove_stale_tmp,
    require_keys,
    save_checkpoint,
    write_jsonl,
)

log = logging.getLogger("qrag.train")
RUN_FILES = ("model_last.pt", "model_best.pt", "metrics.jsonl", "summary.json")
METRICS = "metrics.jsonl"
RESUME = "continue the run with resume=true"  # what to do after a full disk
# What resume reads from model_last.pt besides the learner's own entries (a KeyError otherwise).
RESUME_KEYS = ("config", "learner.agent", "learner.counters", "best", "rng", "eval_rng")
DAMAGED = "restore it from a copy, or start a new run in another folder (hydra.run.dir=...)"


class RunFolderError(RuntimeError):
    pass


# What a start writes before its first checkpoint besides the run files: Hydra's records and log,
# the lock. A folder holding nothing else held no run, and is removed again if the start fails.
START_FILES = (".hydra", ".lock", "train_q_rag.log")


def holds_no_run(run_dir: Path) -> bool:
    """True for a folder that does not exist yet or holds only what a start writes first."""
    if not run_dir.is_dir():
        return True
    return all(p.name in START_FILES for p in run_dir.iterdir())


def discard_failed_start(run_dir: Path) -> None:
    """Remove a folder made by a start that failed before its first checkpoint: Hydra's records,
    its log (the error was printed), then the folder if nothing else is in it."""
    if not holds_no_run(run_dir):
        return
    for p in run_dir.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    run_dir.rmdir()


def run_folder_lock(run_dir: Path) -> FolderLock:
    """The one-training-per-folder lock (also asked, before Hydra writes, by rl/run/callbacks.py)."""
    return FolderLock(
        run_dir / ".lock",
        f"run folder {run_dir}",
        "wait for that training to end, or choose another folder (hydra.run.dir=...)",
    )


def open_run_dir(cfg: DictConfig) -> tuple[Path, FolderLock, bool]:
    """(run folder, its lock, whether to resume). One training per folder; a folder whose run was
    killed before its first checkpoint holds nothing to resume and starts again from step 0."""
    run_dir = hydra_output_dir() or Path(cfg.get("run_dir") or "runs/unnamed")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except PermissionError as exc:
        raise NotWritableError(not_writable_message(run_dir / ".lock", exc)) from None
    lock = run_folder_lock(run_dir).acquire()
    try:
        for p in remove_stale_tmp(run_dir, (*RUN_FILES, "config.yaml", "config_resolved.yaml")):
            log.warning("removed %s, a checkpoint left half-written by a killed run", p)
        has_ckpt = (run_dir / "model_last.pt").exists()
        if cfg.resume and not has_ckpt and not (run_dir / "config.yaml").exists():
            raise RunFolderError(
                f"resume=true but {run_dir} holds no run (no model_last.pt, no config.yaml); "
                f"point hydra.run.dir at the folder of the run to continue"
            )
        if not cfg.resume and has_ckpt:
            existing = [f for f in RUN_FILES if (run_dir / f).exists()]
            raise RunFolderError(
                f"run folder {run_dir} already holds a run ({', '.join(existing)}). Continue it with "
                f"resume=true, or choose a new folder (hydra.run.dir=...)"
            )
        leftovers = (
            [] if has_ckpt else [p for p in (*(run_dir / f for f in RUN_FILES), run_dir / "tb_logs") if p.exists()]
        )
        if leftovers and any(int(r.get("step", 0)) > 0 for r in read_jsonl_rows(run_dir / METRICS)):
            if (run_dir / "summary.json").exists():  # a finished sweep job pruned by keep_last_checkpoints
                raise RunFolderError(
                    f"{run_dir} holds a finished run without model_last.pt (removed by keep_last_checkpoints): "
                    f"it cannot be continued; evaluate its model_best.pt, or train again in another folder"
                )
            raise RunFolderError(  # trained past step 0, then model_last.pt went missing: not ours to delete
                f"{run_dir} holds a run trained past step 0 ({METRICS}) but no model_last.pt to continue it from. "
                f"Restore model_last.pt, or delete {', '.join(p.name for p in leftovers)} to start again"
            )
        if leftovers:
            log.warning(
                "%s has no model_last.pt: its run stopped before the first checkpoint. Removing %s and "
                "starting from step 0",
                run_dir,
                ", ".join(p.name for p in leftovers),
            )
            for p in leftovers:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    except BaseException:
        lock.release()
        raise
    return run_dir, lock, has_ckpt


class Trainer:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        dist.setup()
        self.lock: FolderLock | None = None
        self.writer: Any = None
        self.fresh = False  # rank 0: the folder held no run before this start
        self.started = False  # a checkpoint was (being) written: the folder is a run's from then on
        self.run_dir, self.resuming = dist.run_on_main(self._open_run_dir, cfg)  # rank 0's folder for all ranks
        log.info("run folder: %s", self.run_dir)
        try:
            self._build(cfg)
        except BaseException:
            self.abandon()
            raise

    def _open_run_dir(self, cfg: DictConfig) -> tuple[Path, bool]:
        fresh = holds_no_run(hydra_output_dir() or Path(cfg.get("run_dir") or "runs/unnamed"))
        run_dir, self.lock, resuming = open_run_dir(cfg)
        self.fresh = fresh and not resuming
        return run_dir, resuming

    def abandon(self) -> None:
        """A start failed: release the folder and, if it failed before the first checkpoint of a
        new run, remove the folder, so failed attempts leave nothing behind (README, "The run
        folder")."""
        self.close()
        if self.fresh and not self.started and dist.is_main():
            discard_failed_start(self.run_dir)
            log.warning("the start failed before its first checkpoint: removed %s", self.run_dir)

    def _build(self, cfg: DictConfig) -> None:
        seed = int(cfg.seed)
        seed_everything(seed)  # the same on every rank until the Q-network exists: identical initial weights
        self.device = dist.device(str(cfg.device))
        Precision.resolve(str(cfg.precision), self.device).apply()
        job = dist.sweep_job_num()
        log.info("device %s%s", self.device, "" if job is None else f" (sweep job {job})")
        self.legacy = Legacy.from_cfg(cfg.legacy)  # the run's one reading of the switches
        select_on_test = self.legacy.select_on_test or str(cfg.eval_split) == "test"
        vf = 0.0 if select_on_test else float(cfg.validation_fraction)
        self.eval_split = "test" if select_on_test else "validation"
        test_split = str(cfg.envs.test_split)
        self.train_ds = build_dataset(cfg.envs, "train", seed, vf, self.legacy)
        self.eval_ds = build_dataset(cfg.envs, "validation" if vf > 0 else test_split, seed, vf, self.legacy)
        self.test_ds = build_dataset(cfg.envs, test_split, seed, 0.0, self.legacy)
        self.qnet = qnet_from_cfg(cfg, self.device)
        self._rank_states: list[dict[str, Any]] | None = None
        if dist.enabled():
            dist.broadcast_tensors(self.qnet.state_dict().values())
            if not dist.is_main():  # own dropout masks etc.; rank 0 keeps the 1-process stream
                seed_everything(dist.rank_seed(seed))
        feedback = build_feedback(cfg.feedback, cfg.envs, "train", str(cfg.envs.task), self.legacy)
        env = train_env(cfg, self.train_ds, feedback, self.device, dist.rank_seed(seed))
        self.learner = build_learner(self.qnet, env, cfg, self.legacy)
        self.settings = eval_settings(cfg)
        self.eval_rng = derive_rng(seed, "eval-subset")
        n_eval = min(int(cfg.eval_episodes), len(self.eval_ds))
        self.eval_indices = sorted(int(i) for i in self.eval_rng.choice(len(self.eval_ds), n_eval, replace=False))
        self.best = float("-inf")
        self.untrained_test: dict[str, Any] | None = None
        self.metrics_rows: list[dict[str, Any]] = []  # also in every checkpoint: metrics.jsonl is rebuilt from it

    def open_writer(self, purge_step: int | None) -> None:
        """TensorBoard writer; after a resume, events logged past the checkpoint are dropped."""
        if self.cfg.logger.tensorboard and dist.is_main():
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(
                str(self.run_dir / "tb_logs"), comment=f"_QRAG_{self.cfg.envs.task}", purge_step=purge_step
            )

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(
        self, dataset: Any, indices: list[int], phase: str, what: str = "evaluation"
    ) -> tuple[dict[str, Any], list[dict]]:
        """Greedy episodes on ``indices``; a log line says how many, and a bar shows the progress."""
        fb = build_feedback(self.cfg.feedback, self.cfg.envs, "test", str(self.cfg.envs.task), self.legacy)
        show = bool(self.cfg.logger.progress_bar) and dist.is_main()
        log.info("%s: %d %s samples", what, len(indices), phase)
        with progress(
            greedy_episodes(self.qnet, dataset, indices, fb, self.settings),
            total=len(indices),
            desc=f"{what} ({phase})",
            unit="sample",
            leave=False,
            dynamic_ncols=True,
            disable=not show,
        ) as bar:
            records = list(bar)
        summary = summarize(records)
        summary["split"] = phase
        return summary, records

    def in_training_eval(self) -> dict[str, Any]:
        indices = self.eval_indices
        if self.legacy.eval_resample:  # ref: fresh indices with replacement each time
            indices = [int(i) for i in self.eval_rng.integers(len(self.eval_ds), size=len(self.eval_indices))]
        summary, _ = self.evaluate(self.eval_ds, indices, self.eval_split, "eval")
        return summary

    def test_indices(self) -> list[int]:
        n = int(self.cfg.final_eval_episodes)
        n = len(self.test_ds) if n < 0 else min(n, len(self.test_ds))
        return list(range(n))

    # -- checkpoints ----------------------------------------------------------------------
    def rank_state(self) -> dict[str, Any]:
        """What differs between data-parallel ranks: environments and random streams."""
        return {
            "env": self.learner.env.state_dict(),
            "policy_gen": self.learner.policy_gen.get_state(),
            "rng": rng_state(),
        }

    def load_rank_state(self, state: dict[str, Any]) -> None:
        self.learner.env.load_state_dict(state["env"])
        self.learner.policy_gen.set_state(state["policy_gen"])
        set_rng_state(state["rng"])
        if any(ep is None for ep in self.learner.env.episodes):
            self.learner.env.reset_all()

    def checkpoint(self) -> dict[str, Any]:
        extra = {} if self._rank_states is None else {"ranks": self._rank_states}
        return {
            **extra,
            "learner": self.learner.state_dict(),
            "best": self.best,
            "rng": rng_state(),
            "eval_rng": self.eval_rng.bit_generator.state,
            "untrained_test": self.untrained_test,
            "metrics": list(self.metrics_rows),
            "config": OmegaConf.to_container(without_hydra(self.cfg), resolve=True),
            "code_version": code_version(),
        }

    def best_checkpoint(self) -> dict[str, Any]:
        """What evaluation reads (rl/run/checkpoints.py): the online encoders' weights and the config,
        without the target encoders, the optimiser, the environments and the metric rows."""
        return {
            "learner": {"agent": eval_weights(self.learner.qnet)},
            "best": self.best,
            "step": self.learner.counters.optimizer_steps,
            "config": OmegaConf.to_container(without_hydra(self.cfg), resolve=True),
            "code_version": code_version(),
        }

    def save(self, name: str) -> None:
        state = self.best_checkpoint() if name == "model_best.pt" else self.checkpoint()
        save_checkpoint(state, self.run_dir / name, RESUME)

    def resume(self) -> None:
        path = self.run_dir / "model_last.pt"
        # Loaded onto the CPU: modules and optimisers copy their tensors onto their own device,
        # while RNG states (torch, CUDA, the policy generator) and the DQN replay rows must stay CPU
        # tensors (loading them onto a GPU made resume fail there: "RNG state must be a ByteTensor").
        state = load_checkpoint(path, map_location="cpu")
        require_keys(state, path, RESUME_KEYS, DAMAGED)
        best_path = self.run_dir / "model_best.pt"
        if float(state["best"]) > float("-inf") and not best_path.is_file():
            raise RunFolderError(
                f"{best_path} is missing, though {path.name} records a best evaluation (return "
                f"{float(state['best']):.3f}) saved there; restore it from a copy, or start a new run in "
                f"another folder (hydra.run.dir=...)"
            )
        old = OmegaConf.create(upgrade_run_config(state["config"]))  # a checkpoint of an older version
        trained_with, now = str(old.algo.get("objective", "pqn")), str(self.cfg.algo.objective)
        if trained_with != now:  # another learner's state has other entries (a bare KeyError otherwise)
            raise RunFolderError(
                f"{path} was trained with learner={trained_with}, this command has learner={now}: resume with "
                f"learner={trained_with}, or start a new run in another folder (hydra.run.dir=...)"
            )
        diffs = config_differences(old, OmegaConf.create(OmegaConf.to_container(without_hydra(self.cfg), resolve=True)))
        if diffs and dist.is_main():
            log.warning("resuming with a config that differs from the checkpoint's:\n  %s", "\n  ".join(diffs))
        own = self.rank_state() if dist.enabled() and not dist.is_main() else None
        try:
            self.learner.load_state_dict(state["learner"])
        except ValueError as e:  # state shaped by other settings, e.g. a replay buffer of another size
            raise RunFolderError(f"cannot resume from {path}: {e}") from None
        except KeyError as e:  # an entry of the learner's state missing
            raise CheckpointLoadError(
                f"{path} lacks the learner entry {e} (it was not written whole); {DAMAGED}"
            ) from None
        self.best = float(state["best"])
        self.untrained_test = state.get("untrained_test")
        self.eval_rng.bit_generator.state = state["eval_rng"]
        set_rng_state(state["rng"])
        if own is not None:  # rank r > 0 continues its own environments (rank 0's are the learner's)
            saved = state.get("ranks") or []
            if dist.rank() < len(saved):
                self.load_rank_state(saved[dist.rank()])
            else:
                log.warning(
                    "rank %d: the checkpoint holds no state for this rank (saved by %d ranks); "
                    "its environments start afresh",
                    dist.rank(),
                    len(saved) or 1,
                )
                self.load_rank_state(own)
        if dist.is_main():
            self.restore_metrics(state)
        log.info("resumed %s at optimiser step %d", self.run_dir, self.learner.counters.optimizer_steps)

    def restore_metrics(self, state: dict[str, Any]) -> None:
        """metrics.jsonl = the rows of the checkpoint: a row written after it (a kill between the
        two) is dropped and one it holds but the file lacks is restored, so none is doubled or lost."""
        path = self.run_dir / METRICS
        on_disk = read_jsonl_rows(path)
        rows = state.get("metrics")
        if rows is None:  # a checkpoint of an older version: the file's rows up to its step, one per step
            step = int(state["learner"]["counters"]["optimizer_steps"])
            by_step: dict[int, dict[str, Any]] = {}
            for r in on_disk:
                if int(r["step"]) <= step:
                    by_step.setdefault(int(r["step"]), r)
            rows = [by_step[k] for k in sorted(by_step)]
        self.metrics_rows = list(rows)
        exact = "".join(json.dumps(r) + "\n" for r in self.metrics_rows).encode()
        if on_disk != self.metrics_rows or (path.exists() and path.read_bytes() != exact):  # e.g. a torn last line
            write_jsonl(path, self.metrics_rows, RESUME)
            log.warning(
                "%s: rewritten from the checkpoint (%d rows on disk, %d in the checkpoint)",
                path,
                len(on_disk),
                len(self.metrics_rows),
            )

    # -- logging --------------------------------------------------------------------------
    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        if self.writer is not None:
            for k, v in scalars.items():
                if v is not None:
                    self.writer.add_scalar(k, v, step)

    def write_config(self) -> None:
        plain = without_hydra(self.cfg)
        atomic_write_text(self.run_dir / "config.yaml", OmegaConf.to_yaml(plain))
        atomic_write_text(self.run_dir / "config_resolved.yaml", OmegaConf.to_yaml(plain, resolve=True))

    def env_steps(self) -> int:
        """Environment steps of all ranks together (each rank steps the same number)."""
        return self.learner.counters.env_steps * dist.world()

    def eval_and_record(self, extra: dict[str, Any]) -> None:
        """In-training evaluation: rank 0 evaluates and saves, the other ranks wait."""
        if dist.enabled():
            dist.check_in_sync(self.qnet.state_dict().values(), "model weights")
            self._rank_states = dist.gather_object(self.rank_state())
        if dist.is_main():
            self.record_eval(self.in_training_eval(), extra)
        dist.barrier()

    def record_eval(self, summary: dict[str, Any], extra: dict[str, Any]) -> None:
        """Order matters for kills: model_best.pt, then model_last.pt (which holds the row), then the
        row in metrics.jsonl. Resume rebuilds metrics.jsonl from model_last.pt, and a model_best.pt
        newer than model_last.pt is rewritten when the resumed run reaches that evaluation again."""
        c = self.learner.counters
        row = {
            "step": c.optimizer_steps,
            "env_steps": self.env_steps(),
            "eval/return": summary["return"],
            "eval/fact_em": summary["fact_em"],
            "eval/fact_f1": summary["fact_f1"],
            "eval/split": summary["split"],
            **extra,
        }
        self.metrics_rows.append(row)
        # a tie goes to the later model: on a saturated validation set (every return maximal) a strict
        # rule keeps the step-0 encoder and hides what training adds (DESIGN §5.8, §11 #51)
        improved = summary["return"] > self.best or (
            summary["return"] == self.best and not self.legacy.best_keeps_earliest_tie
        )
        self.started = True
        if improved:
            self.best = summary["return"]
            self.save("model_best.pt")
        self.save("model_last.pt")
        append_line(self.run_dir / METRICS, json.dumps(row), RESUME)
        self.log_scalars(
            {"eval r_sum": summary["return"], "eval/fact_em": summary["fact_em"], "eval/fact_f1": summary["fact_f1"]},
            self.env_steps(),
        )
        log.info(
            "eval @ step %d (%s): return %.3f fact_em %s fact_f1 %s%s",
            c.optimizer_steps,
            summary["split"],
            summary["return"],
            _fmt(summary["fact_em"]),
            _fmt(summary["fact_f1"]),
            " (best)" if improved else "",
        )

    # -- main loop ------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """The run to its end; the run folder is released however it ends."""
        try:
            return self._train()
        except BaseException:
            self.abandon()
            raise
        finally:
            self.close()

    def _train(self) -> dict[str, Any]:
        cfg, learner = self.cfg, self.learner
        total = int(cfg.steps_count)
        self.log_batch()
        if self.resuming:
            self.resume()
            self.open_writer(purge_step=self.env_steps())
        else:
            self.open_writer(purge_step=None)
            if dist.is_main():
                self.write_config()
            if self.test_indices() and dist.is_main():
                self.untrained_test, _ = self.evaluate(self.test_ds, self.test_indices(), "test", "untrained retriever")
                log.info(
                    "untrained retriever on %d test samples: fact_em %s fact_f1 %s",
                    self.untrained_test["n"],
                    _fmt(self.untrained_test["fact_em"]),
                    _fmt(self.untrained_test["fact_f1"]),
                )
            learner.env.reset_all()
            self.eval_and_record({})
        log_every = int(cfg.logger.log_interval)
        # After a resume the first log window starts at the resume step, so its means cover fewer
        # steps than an uninterrupted run's line there; the line says so.
        resumed_from = learner.counters.optimizer_steps if self.resuming else None
        if resumed_from is not None and resumed_from < total:
            nxt = min(total, (resumed_from // log_every + 1) * log_every)
            log.info(
                "resumed at optimiser step %d: the log line at step %d averages steps %d-%d only (a fresh window)",
                resumed_from,
                nxt,
                resumed_from + 1,
                nxt,
            )
        acc: dict[str, float] = {}
        n_acc = 0
        t_last, env_last = time.perf_counter(), learner.counters.env_steps
        loop = {"steps": learner.counters.optimizer_steps, "start": time.time(), "eval_s": 0.0}
        with progress(
            total=total,
            initial=learner.counters.optimizer_steps,
            desc="train",
            dynamic_ncols=True,
            disable=not cfg.logger.progress_bar or not dist.is_main(),
        ) as bar:
            while learner.counters.optimizer_steps < total:
                before = learner.counters.optimizer_steps
                scalars = learner.micro_step()
                for k, v in scalars.items():
                    acc[k] = acc.get(k, 0.0) + v
                n_acc += 1
                if learner.counters.optimizer_steps == before:
                    continue
                step = learner.counters.optimizer_steps
                bar.update(1)
                if step % log_every == 0 or step == total:
                    now = time.perf_counter()
                    means = {k: v / n_acc for k, v in acc.items()}
                    means["sps"] = (learner.counters.env_steps - env_last) * dist.world() / max(now - t_last, 1e-9)
                    means["state_truncations"] = float(self.qnet.state_truncations)
                    fin = learner.drain_returns()
                    if fin:
                        means["train r_sum"] = sum(fin) / len(fin)
                    self.log_scalars(means, self.env_steps())
                    loss = means.get(learner.LOSS, float("nan"))
                    bar.set_postfix(
                        ret=f"{means.get('train r_sum', float('nan')):.3f}",
                        loss=f"{loss:.4f}",
                        sps=f"{means['sps']:.1f}",
                    )
                    shown = {k: means[k] for k in ("q_mean", "alpha", "lr") if k in means}
                    window = ""
                    if resumed_from is not None:
                        window = f" [window since resume: steps {resumed_from + 1}-{step}]"
                        resumed_from = None
                    log.info(
                        "step %d/%d env_steps %d %s %.4f train_return %s %s sps %.1f%s",
                        step,
                        total,
                        self.env_steps(),
                        learner.LOSS,
                        loss,
                        _fmt(means.get("train r_sum")),
                        " ".join(f"{k} {v:.3g}" for k, v in shown.items()),
                        means["sps"],
                        window,
                    )
                    acc, n_acc = {}, 0
                    t_last, env_last = now, learner.counters.env_steps
                if step % int(cfg.eval_interval) == 0 or step == total:
                    t_eval = time.time()
                    self.eval_and_record(learner.eval_row())
                    loop["eval_s"] += time.time() - t_eval
        # throughput of this process's training loop (scripts/bench_concurrency.sh sums it over runs)
        end = time.time()
        self.train_loop = {
            "steps": learner.counters.optimizer_steps - loop["steps"],
            "start": loop["start"],
            "end": end,
            "seconds_without_eval": end - loop["start"] - loop["eval_s"],
        }
        if not dist.enabled():
            return self.finish()
        summary = self.finish() if dist.is_main() else None
        dist.barrier()
        return dist.broadcast_object(summary)

    def tag(self) -> str:
        """``[Q-RAG]``, or in a -m sweep ``[Q-RAG job <subdir>]``: result lines name their job."""
        return "[Q-RAG]" if dist.sweep_job_num() is None else f"[Q-RAG job {self.run_dir.name}]"

    def log_batch(self) -> None:
        """Transitions per optimiser step: world × (L × E ≥ batch_size) × accumulate_grads."""
        b, w = self.learner.batch_shape(), dist.world()
        per_rank = b.rollout_len * b.n_envs
        log.info(
            "effective batch: %d ranks × %d transitions (L=%d × E=%d, batch_size=%d) × accumulate_grads %d "
            "= %d transitions per optimiser step",
            w,
            per_rank,
            b.rollout_len,
            b.n_envs,
            b.batch_size,
            b.k_accum,
            w * per_rank * b.k_accum,
        )

    def finish(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "best/eval_return": self.best,
            "eval_split": self.eval_split,
            "optimizer_steps": self.learner.counters.optimizer_steps,
            "env_steps": self.env_steps(),
            "train_loop": getattr(self, "train_loop", None),
        }
        if dist.enabled():
            b = self.learner.batch_shape()
            summary.update(
                {"world_size": dist.world(), "effective_batch": dist.world() * b.rollout_len * b.n_envs * b.k_accum}
            )
        if self.untrained_test is not None:
            best = load_checkpoint(self.run_dir / "model_best.pt", map_location="cpu")
            require_keys(best, self.run_dir / "model_best.pt", ("learner.agent",), DAMAGED)
            load_eval_weights(self.qnet, best["learner"]["agent"], self.run_dir / "model_best.pt")
            trained, _ = self.evaluate(self.test_ds, self.test_indices(), "test", "trained retriever")
            summary.update(
                {
                    "untrained/fact_em": self.untrained_test["fact_em"],
                    "untrained/fact_f1": self.untrained_test["fact_f1"],
                    "untrained/return": self.untrained_test["return"],
                    "trained/fact_em": trained["fact_em"],
                    "trained/fact_f1": trained["fact_f1"],
                    "trained/return": trained["return"],
                    "test_samples": trained["n"],
                }
            )
            result = (
                f"held-out test ({trained['n']} samples): fact F1 untrained "
                f"{_fmt(self.untrained_test['fact_f1'])} -> trained {_fmt(trained['fact_f1'])}; fact EM "
                f"{_fmt(self.untrained_test['fact_em'])} -> {_fmt(trained['fact_em'])}"
            )
        else:
            result = f"best {self.eval_split} return {self.best:.3f}"
        atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        print(f"{self.tag()} {result}; summary: {self.run_dir / 'summary.json'}", flush=True)
        keep = self.cfg.get("keep_last_checkpoints")
        if keep is not None and dist.sweep_job_num() is not None:
            for p in prune_sweep_checkpoints(self.run_dir.parent, int(keep), self.run_dir):
                log.info("keep_last_checkpoints=%d: removed %s (a finished job's resume state)", int(keep), p)
        return summary


def _fmt(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def run(cfg: DictConfig) -> dict[str, Any]:
    check_training(cfg)  # every value checked before anything is written
    return Trainer(cfg).train()
