"""Retrieval environments, dataset loaders and feedback (reward) models.

Dependency direction (never reversed): ``prompts_and_metrics`` <- ``envs`` <- ``rl``.
Rewards live here, next to the environment that pays them; the learner in ``rl``
imports the environment and sample types from here, never the other way round.
"""
