"""Training run: ``run(cfg) -> metrics`` (the Hydra entry point is train_q_rag.py). The loop
(:meth:`Trainer.loop`) comes first, then evaluation, checkpoints and building. The run folder's
lifecycle is rl/run/run_folder.py, the log windows rl/run/log_window.py, the evaluation sets
rl/run/train_eval.py.

Data parallel under torchrun / accelerate launch (docs/DISTRIBUTED.md): every rank acts in its
own environments and gradients are averaged in PQNLearner.optimizer_step; rank 0 alone writes the
run folder and evaluates while the others wait at a barrier.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from envs.data.registry import build_dataset, first_samples
from envs.feedback import build_feedback
from envs.legacy import Legacy
from rl import distributed as dist
from rl.model.precision import Precision
from rl.run.build import build_learner, late_config, qnet_from_cfg, train_env
from rl.run.checkpoints import eval_weights, load_eval_weights, prune_sweep_checkpoints
from rl.run.config import code_version, rng_state, seed_everything, set_rng_state, without_hydra
from rl.run.device_memory import DeviceMemory
from rl.run.log_window import LogWindow, fmt, log_batch
from rl.run.progress import progress
from rl.run.run_folder import (
    DAMAGED,
    METRICS,
    RESUME,
    RunFolderError,
    discard_failed_start,
    folder_of,
    holds_no_run,
    open_run_dir,
    read_resume_state,
    restore_metrics,
    resume_config,
    write_config,
)
from rl.run.train_eval import RunEvaluation, selection_split
from rl.run.validate import check_training
from runstore import (
    CheckpointLoadError,
    FolderLock,
    append_line,
    atomic_write_text,
    load_checkpoint,
    require_keys,
    save_checkpoint,
)

log = logging.getLogger("qrag.train")


class Trainer:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        dist.setup()
        self.lock: FolderLock | None = None
        self.writer: Any = None
        self.fresh = False  # rank 0: the folder held no run before this start
        self.started = False  # a checkpoint was (being) written: the folder is a run's from then on
        self.resumed_with: list[str] = []  # the keys the command line changed in the run's own config
        # rank 0's folder, and a resume's config (the run's own), for all ranks
        self.run_dir, self.resuming, own = dist.run_on_main(self._open_run_dir, cfg)
        log.info("run folder: %s", self.run_dir)
        try:
            if own is not None:
                self.cfg = cfg = OmegaConf.create(own[0])
                self.resumed_with = own[1]
                check_training(cfg)
            self._build(cfg)
        except BaseException:
            self.abandon()
            raise

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
        log_batch(self.learner.batch_shape(), dist.world())
        self.resume() if self.resuming else self.start()
        self.train_loop = self.loop()
        if not dist.enabled():
            return self.finish()
        summary = self.finish() if dist.is_main() else None
        dist.barrier()
        return dist.broadcast_object(summary)

    def loop(self) -> dict[str, Any]:
        """Micro-steps until ``steps_count`` optimiser steps: a log line every ``logger.log_interval``
        steps, an evaluation (and checkpoint) every ``eval_interval``. Returns the loop's throughput
        (scripts/bench_concurrency.sh sums it over runs)."""
        cfg, learner, c = self.cfg, self.learner, self.learner.counters
        total = int(cfg.steps_count)
        window = LogWindow(
            int(cfg.logger.log_interval), total, c.env_steps, c.optimizer_steps if self.resuming else None
        )
        first, start, eval_s = c.optimizer_steps, time.time(), 0.0
        show = bool(cfg.logger.progress_bar) and dist.is_main()
        with progress(total=total, initial=first, desc="train", dynamic_ncols=True, disable=not show) as bar:
            while c.optimizer_steps < total:
                self.follow_late_haystacks(c.optimizer_steps)
                before = c.optimizer_steps
                window.add(learner.micro_step())
                if c.optimizer_steps == before:
                    continue  # gradients accumulated, no optimiser step yet
                step = c.optimizer_steps
                bar.update(1)
                if window.due(step):
                    means = window.close(
                        c.env_steps, dist.world(), self.qnet.inputs.state_truncations, learner.drain_returns()
                    )
                    means.update(self.memory.window())
                    self.log_scalars(means, self.env_steps())
                    window.report(means, learner.LOSS, step, self.env_steps(), bar)
                if step % int(cfg.eval_interval) == 0 or step == total:
                    t_eval = time.time()
                    self.eval_and_record(learner.eval_row())
                    eval_s += time.time() - t_eval
        end = time.time()
        return {
            "steps": c.optimizer_steps - first,
            "start": start,
            "end": end,
            "seconds_without_eval": end - start - eval_s,
        }

    def follow_late_haystacks(self, step: int) -> None:
        """From optimiser step ``late_haystacks.from_step`` on, episodes that start draw late haystacks.
        Read from the step count, which checkpoints hold, so a resumed run switches at the same step."""
        late = self.late_from is not None and step >= self.late_from
        if late and not self.learner.env.draw_late:
            log.info(
                "optimiser step %d: new training episodes draw late haystacks (envs.num_sentences=%s, from step %d)",
                step,
                self.late_cfg.envs.num_sentences,
                self.late_from,
            )
        self.learner.env.draw_late = late

    def start(self) -> None:
        """A new run: TensorBoard, the config files, the untrained retriever on the test samples
        (``final_eval_episodes``), fresh environments, the step-0 evaluation and checkpoint."""
        self.open_writer(purge_step=None)
        if dist.is_main():
            write_config(self.run_dir, self.cfg)
        if self.evals.test_indices() and dist.is_main():
            self.untrained_test = self.evals.test(self.qnet, "untrained retriever")
            log.info(
                "untrained retriever on %d test samples: fact_em %s fact_f1 %s",
                self.untrained_test["n"],
                fmt(self.untrained_test["fact_em"]),
                fmt(self.untrained_test["fact_f1"]),
            )
        self.learner.start_slots()
        self.eval_and_record({})

    def finish(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "best/eval_return": self.best,
            "eval_split": self.eval_split,
            "optimizer_steps": self.learner.counters.optimizer_steps,
            "env_steps": self.env_steps(),
            "train_loop": getattr(self, "train_loop", None),
            "train_samples": len(self.train_ds),  # what a learning curve's x-axis is: after train_samples
            "selection_samples": len(self.evals.indices),  # the questions model selection compared checkpoints on
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
            trained = self.evals.test(self.qnet, "trained retriever")
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
                f"{fmt(self.untrained_test['fact_f1'])} -> trained {fmt(trained['fact_f1'])}; fact EM "
                f"{fmt(self.untrained_test['fact_em'])} -> {fmt(trained['fact_em'])}"
            )
        else:
            result = f"best {self.eval_split} return {self.best:.3f}"
        atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        line = f"{self.tag()} {result}; summary: {self.run_dir / 'summary.json'}"
        print(line, flush=True)
        to_log_files(line)
        keep = self.cfg.get("keep_last_checkpoints")
        if keep is not None and dist.sweep_job_num() is not None:
            for p in prune_sweep_checkpoints(self.run_dir.parent, int(keep), self.run_dir):
                log.info("keep_last_checkpoints=%d: removed %s (a finished job's resume state)", int(keep), p)
        return summary

    def tag(self) -> str:
        """``[Q-RAG]``, or in a -m sweep ``[Q-RAG job <subdir>]``: result lines name their job."""
        return "[Q-RAG]" if dist.sweep_job_num() is None else f"[Q-RAG job {self.run_dir.name}]"

    # -- evaluation and logging -----------------------------------------------------------
    def in_training_eval(self) -> dict[str, Any]:
        return self.evals.selection(self.qnet)

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
            **self.memory.row(),  # CUDA only: the peaks since the previous row, this evaluation's included
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
            fmt(summary["fact_em"]),
            fmt(summary["fact_f1"]),
            " (best)" if improved else "",
        )

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        if self.writer is not None:
            for k, v in scalars.items():
                if v is not None:
                    self.writer.add_scalar(k, v, step)

    def env_steps(self) -> int:
        """Environment steps of all ranks together (each rank steps the same number)."""
        return self.learner.counters.env_steps * dist.world()

    # -- checkpoints ----------------------------------------------------------------------
    def rank_state(self) -> dict[str, Any]:
        """What differs between data-parallel ranks: environments and random streams."""
        return {
            "env": self.learner.env.state_dict(),
            "policy_gen": self.learner.policy_gen.get_state(),
            "rng": rng_state(),
        }

    def load_rank_state(self, state: dict[str, Any]) -> None:
        self.learner.start_slots(state["env"])  # slots the state leaves empty start afresh
        self.learner.policy_gen.set_state(state["policy_gen"])
        set_rng_state(state["rng"])

    def checkpoint(self) -> dict[str, Any]:
        extra = {} if self._rank_states is None else {"ranks": self._rank_states}
        return {
            **extra,
            "learner": self.learner.state_dict(),
            "best": self.best,
            "rng": rng_state(),
            "eval_rng": self.evals.rng.bit_generator.state,
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
        state = read_resume_state(self.run_dir, self.cfg)
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
        self.evals.rng.bit_generator.state = state["eval_rng"]
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
            self.metrics_rows = restore_metrics(self.run_dir, state)
            if self.resumed_with:  # e.g. more steps: a later plain resume=true goes on to them too
                write_config(self.run_dir, self.cfg)
        log.info("resumed %s at optimiser step %d", self.run_dir, self.learner.counters.optimizer_steps)
        self.open_writer(purge_step=self.env_steps())

    # -- building and the run folder ------------------------------------------------------
    def _build(self, cfg: DictConfig) -> None:
        seed = int(cfg.seed)
        seed_everything(seed)  # the same on every rank until the Q-network exists: identical initial weights
        self.device = dist.device(str(cfg.device))
        self.memory = DeviceMemory(self.device)
        Precision.resolve(str(cfg.precision), self.device).apply()
        job = dist.sweep_job_num()
        log.info("device %s%s", self.device, "" if job is None else f" (sweep job {job})")
        self.legacy = Legacy.from_cfg(cfg.legacy)  # the run's one reading of the switches
        self.eval_split, vf = selection_split(cfg, self.legacy)
        self.train_ds = first_samples(build_dataset(cfg.envs, "train", seed, vf, self.legacy), int(cfg.train_samples))
        # late_haystacks: the same training questions in the late haystacks, and every in-training
        # evaluation in them from the start, so that validation returns compare across the switch
        self.late_cfg = late_config(cfg)
        self.late_from = None if self.late_cfg is None else int(cfg.late_haystacks.from_step)
        late_ds = None
        if self.late_cfg is not None:
            late_ds = build_dataset(self.late_cfg.envs, "train", seed, vf, self.legacy)
            late_ds = first_samples(late_ds, int(cfg.train_samples))
        # builds the eval and test sets
        self.evals = RunEvaluation(self.late_cfg or cfg, self.legacy, self.eval_split, vf)
        self.qnet = qnet_from_cfg(cfg, self.device)
        self._rank_states: list[dict[str, Any]] | None = None
        if dist.enabled():
            dist.broadcast_tensors(self.qnet.state_dict().values())
            if not dist.is_main():  # own dropout masks etc.; rank 0 keeps the 1-process stream
                seed_everything(dist.rank_seed(seed))
        feedback = build_feedback(cfg.feedback, cfg.envs, "train", str(cfg.envs.task), self.legacy)
        env = train_env(cfg, self.train_ds, feedback, self.device, dist.rank_seed(seed), late_ds)
        self.learner = build_learner(self.qnet, env, cfg, self.legacy)
        self.best = float("-inf")
        self.untrained_test: dict[str, Any] | None = None
        self.metrics_rows: list[dict[str, Any]] = []  # also in every checkpoint: metrics.jsonl is rebuilt from it

    def _open_run_dir(self, cfg: DictConfig) -> tuple[Path, bool, tuple | None]:
        """(run folder, whether to resume, for resume=true the run's own config and the keys the
        command line changed in it: read under the folder's lock, refused before anything is written)."""
        fresh = holds_no_run(folder_of(cfg))
        run_dir, self.lock, resuming = open_run_dir(cfg)
        self.fresh = fresh and not resuming
        try:
            own = resume_config(cfg, run_dir) if cfg.resume else None
        except BaseException:
            self.close()
            raise
        return run_dir, resuming, own

    def abandon(self) -> None:
        """A start failed: release the folder and, if it failed before the first checkpoint of a
        new run, remove the folder, so failed attempts leave nothing behind (docs/TRAINING.md, "The
        run folder")."""
        self.close()
        if self.fresh and not self.started and dist.is_main():
            discard_failed_start(self.run_dir)
            log.warning("the start failed before its first checkpoint: removed %s", self.run_dir)

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


def to_log_files(line: str) -> None:
    """A line printed on the console also into the run's log file (train_q_rag.log: the file handler
    Hydra puts on the root logger), not through the console's handler, which would show it twice."""
    record = log.makeRecord(log.name, logging.INFO, __file__, 0, line, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def run(cfg: DictConfig) -> dict[str, Any]:
    check_training(cfg)  # every value checked before anything is written
    return Trainer(cfg).train()
