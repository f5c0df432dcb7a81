"""scripts/trace_calls.py: the reader's path through a call trace (file stops, returns, first visits)."""

from __future__ import annotations

from tests.conftest import load_script

tc = load_script("trace_calls")


def lines(*events: tuple[str, str, str]) -> list[tuple[str, str, str, int]]:
    """Events of functions that each start on line 1 of their file (one function per name)."""
    return [(*e, 1) for e in events]


def test_a_repeated_call_is_not_followed_again_and_returns_are_counted():
    events = lines(
        ("call", "b.py", "f"),  # a.py -> b.py
        ("call", "c.py", "g"),  # -> c.py
        ("return", "c.py", "g"),  # back in b.py (a return to a file already left)
        ("return", "b.py", "f"),  # back in a.py (again)
        ("call", "b.py", "f"),  # the same function again: skipped with everything below it
        ("call", "c.py", "g"),
        ("return", "c.py", "g"),
        ("return", "b.py", "f"),
        ("call", "d.py", "h"),  # a new file
        ("return", "d.py", "h"),  # a.py again
    )
    assert tc.reader_path(events, "a.py") == ["a.py", "b.py", "c.py", "b.py", "a.py", "d.py", "a.py"]
    out = tc.summarise(events, "a.py")
    assert out["file_stops"] == 7
    assert out["returns_to_a_file_already_left"] == 3  # b.py, a.py, a.py
    assert out["functions"] == 3 and out["calls"] == 5
    assert out["files"] == ["b.py", "c.py", "d.py"]


def test_calls_within_one_file_make_no_stop():
    events = lines(("call", "a.py", "helper"), ("return", "a.py", "helper"), ("call", "a.py", "other"))
    assert tc.reader_path(events, "a.py") == ["a.py"]


def test_trace_records_only_the_trees_own_files(tmp_path, monkeypatch):
    mod = tmp_path / "m.py"
    mod.write_text("import json\n\ndef f():\n    return json.dumps([1])\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("m_traced", mod)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    monkeypatch.chdir(tmp_path)  # "<string>" made absolute would look like a file of the tree
    code = compile("m.f()", "<string>", "exec")
    events = tc.trace(lambda: exec(code, {"m": m}), tmp_path)
    assert events == [("call", "m.py", "f", 3), ("return", "m.py", "f", 3)]  # json's own frames are outside the tree


def test_scope_keeps_the_stops_in_its_files_followed_through_the_others():
    events = lines(
        ("call", "rl/learners/base.py", "step"),  # out of scope, but the path goes on through it
        ("call", "rl/model/q.py", "q"),
        ("call", "rl/model/tok.py", "ids"),
        ("return", "rl/model/tok.py", "ids"),  # back in q.py (a return)
        ("call", "envs/env.py", "codes"),  # out of scope: q.py stays in control for the reader
        ("return", "envs/env.py", "codes"),
        ("return", "rl/model/q.py", "q"),  # base.py: dropped
        ("return", "rl/learners/base.py", "step"),  # the start file again (a return)
    )
    full = tc.reader_path(events, "pqn.py")
    assert full == ["pqn.py", "rl/learners/base.py", "rl/model/q.py", "rl/model/tok.py", "rl/model/q.py"] + [
        "envs/env.py",
        "rl/model/q.py",
        "rl/learners/base.py",
        "pqn.py",
    ]
    want = ["pqn.py", "rl/model/q.py", "rl/model/tok.py", "rl/model/q.py", "pqn.py"]
    assert tc.scoped(full, "pqn.py", ("rl/model",)) == want
    out = tc.summarise(events, "pqn.py", ("rl/model",))
    assert out["stop_sequence"] == want
    assert out["file_stops"] == 5 and out["returns_to_a_file_already_left"] == 2
    assert out["files"] == ["rl/model/q.py", "rl/model/tok.py"] and out["calls"] == 2
    assert tc.summarise(events, "pqn.py")["file_stops"] == 9  # no scope: every file


def test_each_comprehension_of_a_file_is_followed(tmp_path, monkeypatch):
    """Every generator expression of a file is named ``<genexpr>``: keyed by (file, name), the second
    one would count as met already and the call under it into b.py would be lost."""
    import importlib.util

    (tmp_path / "b.py").write_text("def g(x):\n    return x\n")
    (tmp_path / "a.py").write_text(
        "import b\n\n\ndef f():\n    n = sum(x for x in range(2))\n    return list(b.g(x) for x in range(2)), n\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.spec_from_file_location("a", tmp_path / "a.py")
    a = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(a)
    events = tc.trace(a.f, tmp_path)
    genexprs = {(f, line) for _, f, fn, line in events if fn == "<genexpr>"}
    assert len(genexprs) == 2  # two code objects of one name
    assert tc.reader_path(events, "a.py") == ["a.py", "b.py", "a.py"]
    assert tc.summarise(events, "a.py")["functions"] == 4  # f, both genexprs, g


def test_calls_back_into_a_file_still_on_the_stack_are_counted():
    """A template hook (base.py calling down into the subclass's file) and a callback (a helper file
    calling the caller's method) are calls back, each occurrence; a call within one file and a call
    into a file whose frames have all returned are not."""
    events = lines(
        ("call", "pqn.py", "micro_step"),
        ("call", "pqn.py", "helper"),  # within one file: no
        ("return", "pqn.py", "helper"),
        ("call", "base.py", "optimizer_step"),
        ("call", "base.py", "clip"),  # within base.py: no
        ("return", "base.py", "clip"),
        ("call", "pqn.py", "after_step"),  # pqn.py is still open below: the hook, yes
        ("call", "base.py", "ema_weight"),  # base.py is still open below: yes
        ("return", "base.py", "ema_weight"),
        ("return", "pqn.py", "after_step"),
        ("return", "base.py", "optimizer_step"),
        ("call", "base.py", "ema_weight"),  # base.py's frames have all returned: no
        ("return", "base.py", "ema_weight"),
        ("call", "acting.py", "values"),
        ("call", "pqn.py", "target"),  # the callback: yes
        ("return", "pqn.py", "target"),
        ("call", "pqn.py", "target"),  # again: counted again, the same pair
        ("return", "pqn.py", "target"),
        ("return", "acting.py", "values"),
        ("return", "pqn.py", "micro_step"),
    )
    back = tc.calls_back(events)
    assert back == [
        ("base.py:1:optimizer_step", "pqn.py:1:after_step"),
        ("pqn.py:1:after_step", "base.py:1:ema_weight"),
        ("acting.py:1:values", "pqn.py:1:target"),
        ("acting.py:1:values", "pqn.py:1:target"),
    ]
    assert tc.calls_back(lines(("call", "a.py", "f"), ("call", "b.py", "g"), ("call", "c.py", "h"))) == []


def test_files_deep_under_each_public_network_call():
    """The most files other than the network's open at once below one call of each public method:
    a re-entry into the network's file and a file met twice on one chain count once; the deepest
    call decides; a method never called is absent; a private method is not counted."""
    q = "rl/model/qnetwork.py"
    events = lines(
        ("call", "learner.py", "step"),
        ("call", q, "q_values"),
        ("call", "enc.py", "run"),  # 1
        ("call", "batch.py", "plan"),  # 2
        ("call", "ragged.py", "concat"),  # 3: enc → batch → ragged
        ("return", "ragged.py", "concat"),
        ("return", "batch.py", "plan"),
        ("return", "enc.py", "run"),
        ("call", "padded.py", "pad"),  # 1 only
        ("return", "padded.py", "pad"),
        ("return", q, "q_values"),
        ("call", q, "q_values"),  # a second call, shallower: the first one's depth stays
        ("call", "enc.py", "run"),
        ("return", "enc.py", "run"),
        ("return", q, "q_values"),
        ("call", q, "prepare"),
        ("call", "inputs.py", "tokens"),
        ("call", q, "_embed"),  # back in the network's file: not a file deeper
        ("call", "inputs.py", "ids"),  # inputs.py again on this chain: counted once
        ("return", "inputs.py", "ids"),
        ("return", q, "_embed"),
        ("return", "inputs.py", "tokens"),
        ("return", q, "prepare"),
        ("call", q, "_padded_chunks"),  # private: not measured
        ("call", "a.py", "x"),
        ("call", "b.py", "y"),
        ("call", "c.py", "z"),
        ("call", "d.py", "w"),
        ("return", "d.py", "w"),
        ("return", "c.py", "z"),
        ("return", "b.py", "y"),
        ("return", "a.py", "x"),
        ("return", q, "_padded_chunks"),
        ("return", "learner.py", "step"),
    )
    deep = tc.files_deep(events)
    assert deep == {
        "q_values": {"depth": 3, "chain": ["enc.py", "batch.py", "ragged.py"]},
        "prepare": {"depth": 1, "chain": ["inputs.py"]},
    }
