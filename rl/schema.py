"""Config schemas: each config key stated once, as a dataclass field with its default, a one-line
doc and its check (docs/DESIGN.md, "Configuration surface").

A :class:`Schema` subclass is the single statement of a config node: :meth:`Schema.defaults` is the
node Hydra's ConfigStore holds (rl/run/config.py registers them, so YAML files only override),
:meth:`Schema.check` adds the validator's checks (rl/run/validate.py) and :meth:`Schema.from_cfg`
reads the composed node into the dataclass, converted by each field's annotation. The stored node
is plain (not an OmegaConf-typed one): a bad value then reaches the validator, which names it in
one line, instead of failing Hydra's composition with a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Iterator
from typing import Any


def param(default: Any, doc: str, **check: Any) -> Any:
    """A config key: ``default``, a one-line ``doc`` and its check. The annotation picks the
    check's kind (bool: true or false; int: ``low``, ``high``; float: ``low``, ``high``,
    ``low_open``; str: ``choices``; ``X | None`` also allows null); ``ok=(predicate, want)`` checks
    a value the kinds can't describe, ``check=fn(checker, key, prefix)`` one that reads other keys;
    ``key`` spells the config key where it differs from the field's name. A :class:`Schema`
    default is a nested node (``prefix.field``)."""
    if _is_schema(default):
        return dataclasses.field(default_factory=default, metadata={"doc": doc, **check})
    return dataclasses.field(default=default, metadata={"doc": doc, **check})


def _unwrap(kind: Any) -> tuple[Any, bool]:
    """(the annotation without ``| None``, whether null is allowed)."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = (a for a in args if a is not type(None))
        return inner, True
    return kind, False


def _is_schema(kind: Any) -> bool:
    """Whether an annotation is a nested node (a :class:`Schema` subclass)."""
    return isinstance(kind, type) and issubclass(kind, Schema)


def _plain(value: Any) -> Any:
    """A default as a config value (a tuple becomes a list)."""
    return list(value) if isinstance(value, tuple) else value


class Schema:
    """Base of a config node's dataclass (a subclass is decorated with ``@dataclass``)."""

    @classmethod
    def keys(cls) -> Iterator[tuple[str, dataclasses.Field, Any]]:
        """(config key, field, annotation without ``| None``) of every field, in order."""
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            yield f.metadata.get("key", f.name), f, hints[f.name]

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The node every key's default makes (what ConfigStore holds)."""
        out: dict[str, Any] = {}
        for key, f, kind in cls.keys():
            if _is_schema(kind):
                out[key] = kind.defaults()
            else:
                out[key] = _plain(f.default)
        return out

    @classmethod
    def docs(cls, prefix: str) -> list[tuple[str, Any, str]]:
        """(dotted key, default, doc) of every leaf, nested nodes expanded (docs/CONFIG.md's tables)."""
        out: list[tuple[str, Any, str]] = []
        for key, f, kind in cls.keys():
            dotted = f"{prefix}.{key}" if prefix else key
            if _is_schema(kind):
                out += kind.docs(dotted)
            else:
                out.append((dotted, _plain(f.default), f.metadata["doc"]))
        return out

    @classmethod
    def table_rows(cls, prefix: str) -> list[str]:
        """docs/CONFIG.md's rows of this node: ``| `key` | `default` | doc |`` (defaults as YAML spells
        them; a ``|`` in a doc escaped for the table)."""
        return [
            f"| `{key}` | `{v if isinstance(v, str) else json.dumps(v)}` | {doc.replace('|', chr(92) + '|')} |"
            for key, v, doc in cls.docs(prefix)
        ]

    @classmethod
    def from_cfg(cls, node: Any) -> Any:
        """The dataclass from a composed node, each value converted by its field's annotation
        (``float``, ``int``, ``bool``, ``str``, ``tuple[float, ...]``; ``X | None`` keeps a null).
        Every key must be in the node (ConfigStore put each default there): a missing one raises
        the config's own error, naming it. Keys without a field are not read."""
        values = {}
        for key, f, annotation in cls.keys():
            kind, nullable = _unwrap(annotation)
            value = getattr(node, key) if not isinstance(node, dict) else node[key]
            if nullable and value is None:
                values[f.name] = None
            elif _is_schema(kind):
                values[f.name] = kind.from_cfg(value)
            elif typing.get_origin(kind) is tuple:
                (item, *_) = typing.get_args(kind)
                values[f.name] = tuple(item(v) for v in value)
            else:
                values[f.name] = kind(value)
        return cls(**values)

    @classmethod
    def check(cls, checker: Any, prefix: str) -> None:
        """Add every field's check of the node at ``prefix`` to an rl.run.validate.Checker."""
        for key, f, annotation in cls.keys():
            kind, nullable = _unwrap(annotation)
            dotted = f"{prefix}.{key}" if prefix else key
            meta = f.metadata
            if "check" in meta:
                meta["check"](checker, dotted, prefix)
            elif _is_schema(kind):
                kind.check(checker, dotted)
            elif "ok" in meta:
                predicate, want = meta["ok"]
                checker.check(dotted, predicate, want + (" or null" if nullable else ""), nullable)
            elif "choices" in meta:
                checker.choice(dotted, tuple(meta["choices"]))
            elif kind is bool:
                checker.boolean(dotted)
            elif kind is int:
                checker.integer(dotted, meta.get("low", -(2**63)), nullable, meta.get("high"))
            elif kind is float:
                checker.number(
                    dotted, meta.get("low", -math.inf), meta.get("high"), meta.get("low_open", False), nullable
                )
            else:
                raise TypeError(f"{cls.__name__}.{f.name}: no check for {annotation!r}; give ok= or check=")
        cls.check_more(checker, prefix)

    @classmethod
    def check_more(cls, checker: Any, prefix: str) -> None:
        """Checks of several keys together (a subclass's own; the default has none)."""
