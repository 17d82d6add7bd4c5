"""Reading dataset.json's values with checks: each check that fails raises `Bad`, one
line saying what is wrong and where in the file (`generations[1].run_id: ...`), which
`DatasetSpec.from_json` turns into a SpecError naming the file."""
from __future__ import annotations

import json
from typing import Any, Mapping

KINDS = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
REQUIRED = object()
INT64_MAX = 2 ** 63 - 1


class Bad(Exception):
    """What is wrong, and where in dataset.json: from_json makes it a SpecError."""


class DuplicateKey(ValueError):
    """An object of the JSON text names a key twice: json's last-one-wins would pick a
    value silently."""


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json.loads's object_pairs_hook: the object, or DuplicateKey naming the key."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"the key {json.dumps(key)} appears twice in one object, "
                                   "and a reader cannot tell which value is meant")
            seen.add(key)
    return found


def no_constants(name: str) -> None:
    """json.loads's parse_constant: ValueError for NaN, Infinity and -Infinity, which
    Python's json reads and writes by default but JSON has not (the job writes null
    where a figure is not a number)."""
    raise ValueError(f"{name} is not a JSON value; the job writes null for a figure that "
                     "is not a number")


def at(where: str, key: Any) -> str:
    return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key


def shown(value: Any) -> str:
    """A value of dataset.json as it is written there, cut short when long."""
    text = json.dumps(value)
    return text if len(text) <= 100 else f"{text[:96]} ..."


def typed(value: Any, kind: type, where: str) -> Any:
    if not ((type(value) is int) if kind is int else isinstance(value, kind)):  # no bools
        raise Bad(f"{where}: {shown(value)} is not {KINDS[kind]}")
    return value


def get(d: Mapping, key: str, kind: type, where: str, default: Any = REQUIRED) -> Any:
    """d[key], which must be of `kind`; `default` when it is absent or null (no default:
    it must be there)."""
    value = d.get(key)
    if value is None:
        if default is REQUIRED:
            raise Bad(f"{at(where, key)}: missing (or null)")
        return default
    return typed(value, kind, at(where, key))


def count(d: Mapping, key: str, where: str, default: Any = REQUIRED, least: int = 0) -> int:
    """d[key], a whole number in [least, 2**63 - 1]: every count of dataset.json is an
    int64, so that no reader's arithmetic on it overflows (numpy's, float's)."""
    value = get(d, key, int, where, default)
    if value is not None and value < least:
        raise Bad(f"{at(where, key)}: {value}, not >= {least}")
    if value is not None and value > INT64_MAX:
        raise Bad(f"{at(where, key)}: {shown(value)}, more than 2**63 - 1")
    return value
