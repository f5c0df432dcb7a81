"""How far a reader travels through the code: a call trace of one PQN update or one greedy episode.

    python scripts/trace_calls.py pqn-update [--tree DIR] [--out trace.json] [--set envs.max_steps=3]
    python scripts/trace_calls.py greedy-episode [--tree DIR] [--out trace.json] [--scope rl/model]

Runs the demo preset (``experiment=demo``, CPU; ``--set`` adds Hydra overrides) of the tree at
``--tree`` (default: this one; another checkout or a ``git archive`` of an older commit compares
layouts) and records every call and return inside the tree's own files (not the libraries). The path a reader follows is the call tree with each
function expanded the first time it is met (a repeated call, e.g. the same helper per episode, is not
followed again). A function is its code object: file, first line and name, so each comprehension of a
file (all named ``<listcomp>``, ``<genexpr>``) is a function of its own. Along that path it counts:

* file stops: each change of the file in control (a call into another file, or the return to it);
* returns to a file already left: stops in a file the path has been in before (the ping-pong);
* the files and functions met, and the calls made.

Two counts of how the code is layered (issue 45 item 7), over every call of the trace, not only the
first visits, and never scoped:

* calls back into a file still on the call stack: a call from file A into file B while a frame of B
  is still open below A (B → A → B: a callback, or a template hook); each such call, and the
  distinct (caller, callee) pairs among them;
* files deep under each public Q-network call (``QNetwork.prepare``, ``q_values``,
  ``target_heads``, ``online_heads``): the most files other than rl/model/qnetwork.py open at once
  below one such call (qnetwork → encoding → embedder is 2), and that deepest chain.

``--scope rl/model`` (one or more path prefixes) reads only those files and the start file: stops
in any other file are dropped from the path (the path through them is still followed, so a call
made from the learner into the Q-network counts), and consecutive stops in one file merge. Issue 35
counts the Q-network's own path this way.

``pqn-update`` traces the third micro-step of the PQN learner (its acting and its optimiser step, after
two untraced ones; the demo's episodes last one step, so no target value is computed: ``--set
envs.max_steps=3`` traces one whose targets need them); ``greedy-episode`` traces evaluation's greedy
loop over one validation sample (``rl.eval.greedy.greedy_episodes``). One JSON object goes to
``--out`` (with the stop sequence, the function list, the calls back and the deepest chains) and a
summary line to stdout. Used for the renovations of issues 35 and 45 (experiments/trace/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

Event = tuple[str, str, str, int]  # (event, file, function name, the function's first line)


def trace(call, root: Path) -> list[Event]:
    """(event, file relative to ``root``, function, its first line) of every call/return inside
    ``root`` while ``call`` runs."""
    events: list[Event] = []
    prefix, me = str(root) + os.sep, os.path.abspath(__file__)

    def prof(frame, event, arg):
        if event not in ("call", "return"):
            return
        name = frame.f_code.co_filename
        if name.startswith("<"):  # <string>, <frozen abc>: no file of the tree
            return
        f = os.path.abspath(name)
        if f.startswith(prefix) and f != me and "site-packages" not in f:
            code = frame.f_code
            events.append((event, os.path.relpath(f, root), code.co_name, code.co_firstlineno))

    sys.setprofile(prof)
    try:
        call()
    finally:
        sys.setprofile(None)
    return events


def reader_path(events: list[Event], start: str) -> list[str]:
    """The files in control along the first-visit call tree, one entry per change of file."""
    path, stack, seen, skipping = [start], [start], set(), 0
    for ev, f, fn, line in events:
        if skipping:  # inside a repeated call: not followed again
            skipping += 1 if ev == "call" else -1
            continue
        if ev == "call":
            if (f, line, fn) in seen:  # not (f, fn): a file's comprehensions all share one name
                skipping = 1
                continue
            seen.add((f, line, fn))
            stack.append(f)
        elif len(stack) > 1:
            stack.pop()
        if path[-1] != stack[-1]:
            path.append(stack[-1])
    return path


def scoped(path: list[str], start: str, scope: tuple[str, ...]) -> list[str]:
    """``path`` as a reader of only the files under ``scope`` (and ``start``) sees it."""
    out: list[str] = []
    for f in path:
        if (f == start or f.startswith(scope)) and (not out or out[-1] != f):
            out.append(f)
    return out


def summarise(events: list[Event], start: str, scope: tuple[str, ...] = ()) -> dict:
    """The counts of the path from ``start``; with ``scope`` (path prefixes) only the stops in
    those files and ``start`` (:func:`scoped`), and the files and functions among them."""
    path = reader_path(events, start)
    if scope:
        path = scoped(path, start, scope)
        events = [e for e in events if e[1] == start or e[1].startswith(scope)]
    returns = sum(1 for k, f in enumerate(path) if f in path[:k])
    funcs = sorted({f"{f}:{line}:{fn}" for _, f, fn, line in events})
    return {
        "file_stops": len(path),
        "returns_to_a_file_already_left": returns,
        "files": sorted({x.split(":")[0] for x in funcs}),
        "functions": len(funcs),
        "calls": sum(1 for e in events if e[0] == "call"),
        "stop_sequence": path,
        "function_list": funcs,
    }


def calls_back(events: list[Event]) -> list[tuple[str, str]]:
    """(caller, callee) as ``file:line:name`` of every call into a file that is not the caller's but
    has a frame still open on the call stack (each occurrence, in order)."""
    stack: list[str] = []  # the open frames, as file:line:name
    out = []
    for ev, f, fn, line in events:
        if ev == "return":
            if stack:
                stack.pop()
            continue
        here = f"{f}:{line}:{fn}"
        if stack and stack[-1].split(":")[0] != f and any(s.split(":")[0] == f for s in stack):
            out.append((stack[-1], here))
        stack.append(here)
    return out


QNET_FILE = "rl/model/qnetwork.py"
QNET_PUBLIC = ("prepare", "q_values", "target_heads", "online_heads")


def files_deep(events: list[Event], file: str = QNET_FILE, names: tuple[str, ...] = QNET_PUBLIC) -> dict:
    """For each function ``names`` of ``file`` called in the trace: the most files other than ``file``
    open at once on the call stack below one of its calls, and that chain (the files in the order
    they were entered). Names never called are absent."""
    stack: list[str] = []  # the files of the open frames
    open_calls: list[tuple[str, int]] = []  # (name, its stack depth) of the open calls of ``names``
    out: dict[str, dict] = {}
    for ev, f, fn, _ in events:
        if ev == "return":
            if stack:
                stack.pop()
            if open_calls and len(stack) == open_calls[-1][1]:
                open_calls.pop()
            continue
        if f == file and fn in names:
            open_calls.append((fn, len(stack)))
            out.setdefault(fn, {"depth": 0, "chain": []})
        stack.append(f)
        for name, at in open_calls:
            chain = list(dict.fromkeys(x for x in stack[at + 1 :] if x != file))
            if len(chain) > out[name]["depth"]:
                out[name] = {"depth": len(chain), "chain": chain}
    return out


def build(what: str, overrides: list[str]):
    """The demo's learner (pqn-update) or its Q-network and validation set (greedy-episode), with
    ``overrides`` on top, and the call to trace with the file it starts in."""
    import torch

    from envs.data.registry import build_dataset
    from envs.feedback import build_feedback
    from envs.legacy import Legacy
    from rl.run.build import build_learner, eval_settings, qnet_from_cfg, train_env
    from rl.run.config import compose_config, seed_everything

    torch.set_num_threads(1)
    cfg = compose_config("training", ["experiment=demo", "device=cpu", *overrides])
    seed_everything(42)
    cpu = torch.device("cpu")
    legacy = Legacy.from_cfg(cfg.legacy)
    qnet = qnet_from_cfg(cfg, cpu)
    if what == "pqn-update":
        ds = build_dataset(cfg.envs, "train", 42, float(cfg.validation_fraction), legacy)
        fb = build_feedback(cfg.feedback, cfg.envs, "train", str(cfg.envs.task), legacy)
        env = train_env(cfg, ds, fb, cpu, 42)
        learner = build_learner(qnet, env, cfg, legacy)
        if hasattr(learner, "start_slots"):
            learner.start_slots()
        else:  # a --tree older than LearnerBase.start_slots (there the first step prepared the slots)
            env.reset_all()
        learner.micro_step()
        learner.micro_step()
        return learner.micro_step, "rl/learners/pqn.py"
    from rl.eval.greedy import greedy_episodes

    ds = build_dataset(cfg.envs, "validation", 42, float(cfg.validation_fraction), legacy)
    fb = build_feedback(cfg.feedback, cfg.envs, "test", str(cfg.envs.task), legacy)
    settings = eval_settings(cfg)
    list(greedy_episodes(qnet, ds, [1], fb, settings))  # warm: tokenizer, caches
    return (lambda: list(greedy_episodes(qnet, ds, [0], fb, settings))), "rl/eval/greedy.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["pqn-update", "greedy-episode"])
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1], help="the code tree to trace")
    ap.add_argument("--out", type=Path, help="the JSON trace (default: stdout summary only)")
    ap.add_argument(
        "--scope",
        nargs="+",
        default=[],
        metavar="PREFIX",
        help="count only stops in files under these path prefixes (and the start file), e.g. rl/model",
    )
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="Hydra overrides on the demo preset")
    args = ap.parse_args()
    root = args.tree.resolve()
    sys.path.insert(0, str(root))
    call, start = build(args.what, args.set)
    scope = tuple(args.scope)
    events = trace(call, root)
    back = calls_back(events)
    deep = files_deep(events)
    out = {
        "what": args.what,
        "overrides": args.set,
        "scope": list(scope),
        **summarise(events, start, scope),
        "calls_back_into_a_file_on_the_stack": len(back),
        "call_back_pairs": [list(p) for p in dict.fromkeys(back)],
        "files_deep": deep,
    }
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    keys = ("what", "file_stops", "returns_to_a_file_already_left", "functions", "calls")
    print(
        json.dumps(
            {
                **{k: out[k] for k in keys},
                "files": len(out["files"]),
                "calls_back": len(back),
                "call_back_pairs": len(out["call_back_pairs"]),
                "files_deep": {k: v["depth"] for k, v in deep.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
