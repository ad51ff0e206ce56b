"""Config findings in words people can act on: schema errors as messages at their config paths
(``gpulease:clusters[2].gpus``), the headline, and the order findings are listed in."""
from __future__ import annotations

import re
from typing import Any, Optional

from pydantic import BaseModel, ValidationError

from gpulease.config.schema import (LABEL_VALUE_PATTERN, NAME_PATTERN, NAMESPACE, PATTERN_RULES,
                                    TOP_LEVEL_KEYS, StackConfigModel)
from gpulease.errors import Finding, did_you_mean
from gpulease.tags import label_value


def headline(source: str) -> str:
    """The first line of a ConfigError about the stack config of ``source``."""
    return (f"{source or 'stack config'}: invalid stack configuration — fix the keys below "
            "(reference: docs/config.md) and run again:")


def finding_order(f: Finding) -> tuple:
    """Findings in config order: by top-level key as written in the model, then by path."""
    key = f.path.partition(":")[2].split(".")[0].split("[")[0]
    order = TOP_LEVEL_KEYS.index(key) if key in TOP_LEVEL_KEYS else -1
    nums = tuple(int(n) for n in re.findall(r"\[(\d+)\]", f.path))
    return (order, nums, f.path)


def number(value: Any) -> Optional[float]:
    """A config number as pydantic will read it (numbers and numeric strings), else None (the
    schema reports the value)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _loc_to_path(loc: tuple) -> str:
    out = f"{NAMESPACE}:{loc[0]}" if loc else NAMESPACE
    for part in loc[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _model_for(loc: tuple) -> Optional[type[BaseModel]]:
    """The pydantic model that owns the mapping at ``loc`` (for did-you-mean on unknown keys)."""
    model: Any = StackConfigModel
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return None
        ann = field.annotation
        for cand in (ann, *getattr(ann, "__args__", ())):
            for inner in (cand, *getattr(cand, "__args__", ())):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    model = inner
                    break
            else:
                continue
            break
        else:
            return None
    return model


class _Shown:
    """A bad value as the user wrote it: scalars that Pulumi passes as strings ("-1", "NaN",
    "true") are shown bare, other values by repr."""

    _BARE = re.compile(r"-?(\d+(\.\d*)?([eE][-+]?\d+)?|NaN|Infinity)|true|false")

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        v = self.value
        if isinstance(v, str) and self._BARE.fullmatch(v.strip()):
            return v.strip()
        return repr(v)


def _message(err: dict) -> str:
    t, ctx, value = err["type"], err.get("ctx") or {}, _Shown(err.get("input"))
    if t == "missing":
        return "required key is missing"
    if t == "extra_forbidden":
        return "unknown key"
    if t in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
              "less_than_equal": "<="}[t]
        bound = next(iter(ctx.values()))
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {op} {bound} (got {value!r})"
    if t in ("int_type", "int_parsing", "int_from_float", "float_type", "float_parsing"):
        what = "a whole number" if t.startswith("int") else "a number"
        raw = err.get("input")
        if isinstance(raw, bool) or (isinstance(raw, str) and raw.strip() in ("true", "false")):
            return (f"must be {what} (got {str(raw).lower()}: true/false is not a number; "
                    "write the number)")
        if t == "int_type" and isinstance(raw, float):
            return (f"must be a whole number (got {raw!r}: a count has no fraction; write "
                    f"{int(raw) if raw.is_integer() else 'a whole number'})")
        if isinstance(raw, str) and number(raw) is not None and t.endswith("_type"):
            return f"must be {what}, not text (got {raw!r}: write it without quotes)"
        return f"must be {what} (got {value!r})"
    if t in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {value!r})"
    if t == "string_type":
        return f"must be a string (got {value!r})"
    if t == "list_type":
        return f"must be a list (got {value!r})"
    if t in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping of keys to values (got {value!r})"
    if t == "literal_error":
        return f"must be one of {ctx.get('expected')} (got {value!r})"
    if t == "string_pattern_mismatch":
        what, rule = PATTERN_RULES.get(ctx.get("pattern"), PATTERN_RULES[NAME_PATTERN])
        text = f"{value!r} is not a valid {what}: use {rule}"
        if ctx.get("pattern") == LABEL_VALUE_PATTERN and isinstance(value.value, str):
            suggestion = label_value(value.value)
            if suggestion and suggestion != value:
                text += f' (e.g. "{suggestion}")'
        return text
    if t == "value_error":
        return str(ctx.get("error", err.get("msg", t)))
    if t == "finite_number":
        return f"must be a finite number (got {value!r})"
    if t == "dict_type" and isinstance(value.value, list):
        return f"must be a mapping of keys to values, not a list (got {value!r})"
    if t == "too_short":
        return "must not be empty"
    if t == "too_long":
        return (f"must have at most {ctx.get('max_length')} entries (got "
                f"{ctx.get('actual_length')})")
    return err.get("msg", t)


def findings_from_validation(exc: ValidationError, source: str) -> list[Finding]:
    """The schema's errors as findings at their config paths, in the schema's words."""
    findings = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        msg = _message(err)
        if err["type"] == "extra_forbidden":
            owner = _model_for(loc[:-1])
            hint = did_you_mean(str(loc[-1]), owner.model_fields) if owner else ""
            if len(loc) == 1 and hint:
                hint = hint.replace('"', '"gpulease:', 1)
            findings.append(Finding(_loc_to_path(loc), f"unknown key{hint}", source=source))
            continue
        findings.append(Finding(_loc_to_path(loc), msg, source=source))
    return findings
