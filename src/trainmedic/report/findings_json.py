"""The findings JSON (``trainmedic diagnose --json``): writing it and checking it.

The output is exactly ``Diagnosis.to_dict()`` (DESIGN.md, "Findings JSON"), keys in that fixed
order, with NaN/inf as the strings ``"nan"``/``"inf"``/``"-inf"`` so that strict JSON parsers
accept it. The shape is published as a JSON Schema (``findings.schema.json`` next to this
file); ``validate_findings_json`` checks an object against that schema with a small validator
for the subset of JSON Schema the file uses (no third-party dependency), then checks the few
rules a schema cannot say. Errors name the first bad field, e.g. ``findings[0].evidence[1].basis``.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

from trainmedic.diagnose.finding import Diagnosis

__all__ = ["to_json", "validate_findings_json", "findings_schema", "SchemaValidator"]


def _coerce(obj: Any) -> Any:
    """``json.dumps`` fallback: numpy scalars a detector may leave in a finding."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a core dependency
        raise TypeError(f"not JSON serializable: {type(obj).__name__}") from None
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        x = float(obj)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(obj, np.ndarray):
        return [_coerce(v) for v in obj.tolist()]
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def to_json(diagnosis: Diagnosis, *, indent: int | None = 2) -> str:
    """The findings JSON of ``diagnosis``: deterministic, strict JSON (no NaN tokens)."""
    return json.dumps(diagnosis.to_dict(), indent=indent, ensure_ascii=False,
                      allow_nan=False, default=_coerce)


@functools.cache
def findings_schema() -> dict[str, Any]:
    """The findings JSON Schema shipped with the package."""
    from importlib import resources  # ~10 ms to import: only when a schema is wanted

    text = resources.files("trainmedic.report").joinpath("findings.schema.json").read_text(
        encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    # JSON has no NaN/inf numbers; a float NaN here came from a lax parser or a Python object.
    "number": lambda v: (isinstance(v, int | float) and not isinstance(v, bool)
                         and math.isfinite(v)),
}

#: The JSON Schema keywords this validator understands; a schema using others is refused.
KEYWORDS = frozenset({"$schema", "$id", "$defs", "$ref", "title", "description", "type", "const",
                      "enum", "anyOf", "required", "properties", "additionalProperties",
                      "items", "minimum", "maximum", "minLength"})


class SchemaValidator:
    """A validator for the subset of JSON Schema (2020-12) that ``findings.schema.json`` uses.

    Raises ``ValueError("<path>: <problem>")`` at the first violation, in document order.
    """

    def __init__(self, schema: dict[str, Any]) -> None:
        self.root = schema
        self._check_keywords(schema, "#")

    def _check_keywords(self, node: Any, where: str) -> None:
        if isinstance(node, dict):
            unknown = set(node) - KEYWORDS
            if unknown:
                raise ValueError(f"schema {where}: unsupported keyword(s) {sorted(unknown)}")
            for key in ("properties", "$defs"):
                for name, sub in node.get(key, {}).items():
                    self._check_keywords(sub, f"{where}/{key}/{name}")
            if "items" in node:
                self._check_keywords(node["items"], f"{where}/items")
            for i, sub in enumerate(node.get("anyOf", [])):
                self._check_keywords(sub, f"{where}/anyOf/{i}")

    def _resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#/"):
            raise ValueError(f"schema: only local $ref is supported, got {ref!r}")
        node: Any = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return dict(node)

    def validate(self, value: Any, schema: dict[str, Any] | None = None,
                 path: str = "$") -> None:
        s = self.root if schema is None else schema
        if "$ref" in s:
            self.validate(value, self._resolve(s["$ref"]), path)
        if "anyOf" in s:
            for option in s["anyOf"]:
                try:
                    self.validate(value, option, path)
                    break
                except ValueError:
                    continue
            else:
                raise ValueError(f"{path}: {value!r} is not {self._describe(s)}")
        if "type" in s and not _TYPES[s["type"]](value):
            raise ValueError(f"{path}: expected {s['type']}, got {_json_type(value)} "
                             f"{_short(value)}")
        if "const" in s and value != s["const"]:
            raise ValueError(f"{path}: must be {s['const']!r}, got {_short(value)}")
        if "enum" in s and not any(value == e and type(value) is type(e) for e in s["enum"]):
            raise ValueError(f"{path}: must be one of {s['enum']}, got {_short(value)}")
        if "minLength" in s and isinstance(value, str) and len(value) < s["minLength"]:
            raise ValueError(f"{path}: must not be empty")
        if "minimum" in s and isinstance(value, int | float) and value < s["minimum"]:
            raise ValueError(f"{path}: must be >= {s['minimum']}, got {value!r}")
        if "maximum" in s and isinstance(value, int | float) and value > s["maximum"]:
            raise ValueError(f"{path}: must be <= {s['maximum']}, got {value!r}")
        if isinstance(value, dict):
            for key in s.get("required", []):
                if key not in value:
                    raise ValueError(f"{path}.{key}: required field is missing")
            props = s.get("properties", {})
            for key, sub in value.items():
                if key in props:
                    self.validate(sub, props[key], f"{path}.{key}")
                elif s.get("additionalProperties", True) is False:
                    raise ValueError(f"{path}.{key}: unexpected field")
        if isinstance(value, list) and "items" in s:
            for i, item in enumerate(value):
                self.validate(item, s["items"], f"{path}[{i}]")

    def _describe(self, s: dict[str, Any]) -> str:
        if "$ref" in s:
            return self._describe(self._resolve(s["$ref"]))
        if "anyOf" in s:
            return " or ".join(self._describe(o) for o in s["anyOf"])
        if "enum" in s:
            return "one of " + ", ".join(repr(e) for e in s["enum"])
        if "const" in s:
            return repr(s["const"])
        return f"a{'n' if str(s.get('type', ''))[:1] in 'aeiou' else ''} {s.get('type', 'value')}"


def _json_type(v: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](v):
            return name
    if isinstance(v, float):
        return "non-finite number"
    return type(v).__name__


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


@functools.cache
def _validator() -> SchemaValidator:
    return SchemaValidator(findings_schema())


def validate_findings_json(obj: Any) -> None:
    """Raise ``ValueError`` naming the first bad field if ``obj`` (a parsed findings JSON, or
    its text) is not a valid ``trainmedic.findings/1`` document."""
    if isinstance(obj, str | bytes):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as exc:
            raise ValueError(f"$: not JSON ({exc})") from None
    _validator().validate(obj)
    # What the schema cannot say.
    for i, f in enumerate(obj["findings"]):
        onset, end = f["onset_step"], f["end_step"]
        if onset is not None and end is not None and end < onset:
            raise ValueError(f"$.findings[{i}].end_step: {end} is before onset_step {onset}")
