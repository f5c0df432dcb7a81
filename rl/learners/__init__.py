"""Learners: one file per learning rule, all on the same Q-network, environments and evaluation.

``algo.objective`` (set by ``learner=<name>``) picks one; the trainer uses it only through
:class:`rl.learners.base.Learner`. Adding a learner = a module here (its ``HYPER`` dataclass states
its keys) and its entry in ``LEARNERS``, from which rl/run/config.py registers ``learner=<name>``.
"""

from __future__ import annotations

from omegaconf import DictConfig

from envs.env import VecRetrievalEnv
from envs.legacy import ALL_OFF, Legacy
from rl.learners.base import Learner, LearnerBase, RunSettings
from rl.learners.dqn import DQNLearner
from rl.learners.pqn import PQNLearner
from rl.learners.sac_d import SacDLearner
from rl.learners.sarsa import SarsaLearner
from rl.learners.sft import SFTLearner
from rl.model.qnetwork import QNetwork

LEARNERS: dict[str, type[LearnerBase]] = {
    "pqn": PQNLearner,
    "sft": SFTLearner,
    "dqn": DQNLearner,
    "sarsa": SarsaLearner,
    "sac_d": SacDLearner,
}


def build_learner(qnet: QNetwork, env: VecRetrievalEnv, cfg: DictConfig, legacy: Legacy = ALL_OFF) -> Learner:
    """The learner named by ``algo.objective``: pqn (Q-RAG), sft (the "multi-step RAG w. SFT"
    baseline, DESIGN §4.5), dqn, sarsa, sac_d (rl/learners/dqn.py, sarsa.py, sac_d.py). The one place
    the config is read for a learner: it gets its typed settings (:class:`RunSettings`, its ``HYPER``
    dataclass) and the legacy switches it reads (its ``LEGACY``) as keywords."""
    objective = str(cfg.algo.objective)
    if objective not in LEARNERS:
        raise ValueError(f"algo.objective must be one of {sorted(LEARNERS)}, got {objective!r}")
    learner = LEARNERS[objective]
    return learner(qnet, env, RunSettings.from_cfg(cfg), learner.hyperparams(cfg), **legacy.pick(learner.LEGACY))
