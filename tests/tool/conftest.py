"""The tool tests reuse the evaluation tests' tiny run folder (untrained one-layer MiniLM, qa1,
T = 2): the tool must drive the evaluation's code paths, so the same run serves both."""

from tests.eval.conftest import eval_cfg, tiny_run  # noqa: F401  (fixture and helper re-exported)
