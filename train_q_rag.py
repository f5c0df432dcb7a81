"""Train a Q-RAG retriever: ``python train_q_rag.py [experiment=demo] [key=value ...]``.

Data parallel: ``torchrun --nproc_per_node N train_q_rag.py ...`` (docs/DISTRIBUTED.md).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

import rl.run.config  # noqa: F401  (registers the ${qrag_root:} resolver before composition)
from envs.errors import DatasetFormatError, DatasetNotFoundError, FeedbackError
from envs.types import SampleError
from rl.distributed import hydra_worker_argv
from rl.model.embedder import ModelLoadError
from rl.run.config import PROJECT_ROOT, rename_overrides
from rl.run.train import RunFolderError, run
from rl.run.validate import ConfigError, check_group_choices, check_override_keys, report_and_exit, run_main
from runstore import StorageError

# Mistakes in the command line or the data: one "error: ..." line saying what to do, no traceback.
USER_ERRORS = (
    DatasetNotFoundError,
    DatasetFormatError,
    SampleError,
    ModelLoadError,
    RunFolderError,
    StorageError,
    FeedbackError,
)


@hydra.main(config_path="configs", config_name="training", version_base="1.3")
def main(cfg: DictConfig) -> float:
    try:
        summary = run(cfg)
    except ConfigError as exc:
        report_and_exit(exc)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    return float(summary.get("best/eval_return", 0.0))  # a sweeper can optimise this


if __name__ == "__main__":
    sys.argv = hydra_worker_argv(sys.argv)  # ranks > 0 leave the run folder to rank 0
    sys.argv = rename_overrides(sys.argv)  # old key names (algo.pqn.hyperparams.Lambda) keep working
    if any(a.lstrip("+").lower() == "resume=true" for a in sys.argv[1:]):
        # a resume continues the run with its own config (rl/run/run_folder.py, resume_config): Hydra
        # must not replace the run's .hydra/ records with this command's, whether or not it starts
        sys.argv.append("hydra.output_subdir=null")
    try:
        check_group_choices(sys.argv[1:], PROJECT_ROOT / "configs")
        check_override_keys(sys.argv[1:], PROJECT_ROOT / "configs", "training")
    except ConfigError as exc:
        report_and_exit(exc)
    run_main(main)
