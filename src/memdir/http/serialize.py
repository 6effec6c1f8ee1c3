"""Results of service verbs as JSON values."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..records import fields, is_record


def jsonable(value: Any) -> Any:
    """``to_dict()`` when a result has one, records as dicts, containers recursively."""
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    if is_record(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
