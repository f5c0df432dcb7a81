"""The packages import each other one way (README.md, "Layout"): every import of a project module,
at the top of a file or inside a function, points to a lower layer or within its own layer, and no
modules import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

from rl.run.config import PROJECT_ROOT

# lowest first; a module may import its own layer and those below it
LAYERS = (
    ("runstore",),
    ("prompts_and_metrics",),
    ("envs",),
    ("rl.distributed", "rl.model", "rl.schema"),
    ("rl.learners", "rl.eval"),
    ("rl.run",),
    ("rl.tool",),  # the retriever product: loads runs through rl.run, which never imports it
)
PACKAGES = ("runstore", "prompts_and_metrics", "envs", "rl")


def layer(module: str) -> int:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path) -> set[str]:
    """Project modules ``path`` imports (``from a import b`` counts ``a.b`` when it is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            names = [s for s in subs if module_path(s)] or [node.module]
        for name in names:
            if name.split(".")[0] in PACKAGES and (module_path(name) is not None):
                found.add(name)
    return found


def module_path(name: str) -> Path | None:
    base = PROJECT_ROOT.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (PROJECT_ROOT / pkg).rglob("*.py")]
    return {module_name(p): {m for m in project_imports(p) if m != module_name(p)} for p in files}


def test_every_import_points_down_or_sideways():
    upward = [
        f"{src} (layer {layer(src)}) imports {dst} (layer {layer(dst)})"
        for src, dsts in sorted(graph().items())
        for dst in sorted(dsts)
        if layer(dst) > layer(src)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(g.get(node, ())):
            if nxt not in g:  # a package __init__ reached through "from pkg import module"
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(g):
        if start not in state:
            visit(start, [start])
    assert not cycles, "\n".join(cycles)


def test_the_checks_see_a_wrong_arrow(tmp_path):
    """The rule itself: an envs module importing the trainer is upward."""
    assert layer("envs.env") < layer("rl.run.train") and layer("rl.model.qnetwork") < layer("rl.learners.pqn")
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from rl.run.train import run\n")
    assert "rl.run.train" in project_imports(bad)


# inside rl.model, lowest first: token ids, then how encoders run, then the network itself
MODEL_LAYERS = ("rl.model.tokens", "rl.model.fast")


def model_layer(module: str) -> int:
    for rank, prefix in enumerate(MODEL_LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return len(MODEL_LAYERS)


def test_inside_rl_model_tokens_then_the_speed_layer_then_the_network():
    upward = [
        f"{src} imports {dst}"
        for src, dsts in sorted(graph().items())
        if src.startswith("rl.model.")
        for dst in sorted(dsts)
        if dst.startswith("rl.model.") and model_layer(dst) > model_layer(src)
    ]
    assert not upward, "\n".join(upward)
    assert (
        model_layer("rl.model.tokens.splice") < model_layer("rl.model.fast.encoding") < model_layer("rl.model.caches")
    )


def test_the_tool_loads_runs_without_the_evaluation_driver():
    """rl/tool reads run folders through rl/run/load_run.py and rl/run/eval_config.py, the pieces
    evaluation is built on, never through the driver rl/run/evaluate.py."""
    g = graph()
    assert "rl.tool.retriever" in g and "rl.run.load_run" in g["rl.tool.retriever"]
    assert not [src for src, dsts in g.items() if src.startswith("rl.tool") and "rl.run.evaluate" in dsts]
