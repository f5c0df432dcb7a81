"""Evaluate a trained retriever (DESIGN §9.1):
``python eval_retriever.py pretrained_path=runs/<run> [envs.num_sentences=1200] [key=value ...]``.

Writes ``<run>/eval_seed{seed}_ns{N}.jsonl`` (BabiLong; other names per docs/EVALUATION.md), its
``.summary.json`` and ``.jsonl.meta.json``. Multirun sweeps work:
``python eval_retriever.py -m pretrained_path=runs/<run> envs.num_sentences=50,160,1200``.
Sharded over N processes: ``torchrun --nproc_per_node N eval_retriever.py ...`` (docs/DISTRIBUTED.md).
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
from rl.run.config import PROJECT_ROOT
from rl.run.evaluate import EvalError, run
from rl.run.validate import ConfigError, check_group_choices, check_override_keys, report_and_exit, run_main
from runstore import StorageError

USER_ERRORS = (
    EvalError,
    StorageError,
    DatasetNotFoundError,
    DatasetFormatError,
    SampleError,
    ModelLoadError,
    FeedbackError,
)


@hydra.main(config_path="configs", config_name="testing", version_base="1.3")
def main(cfg: DictConfig) -> float:
    try:
        summary = run(cfg)
    except ConfigError as e:
        report_and_exit(e)
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    return float(summary.get("fact_f1") or 0.0)


if __name__ == "__main__":
    sys.argv = hydra_worker_argv(sys.argv)  # ranks > 0 leave the run folder to rank 0
    try:
        check_group_choices(sys.argv[1:], PROJECT_ROOT / "configs")
        check_override_keys(sys.argv[1:], PROJECT_ROOT / "configs", "testing")
    except ConfigError as exc:
        report_and_exit(exc)
    run_main(main)
