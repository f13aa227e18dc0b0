"""Readers of the statistics' JSON sections: each takes an object, a key and where it
came from (for the message), and returns the value typed, or raises :class:`SectionError`
naming what is wrong. :mod:`toposig.records.sections` and
:mod:`toposig.records.controlled` read with them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from toposig.records.vocabulary import is_number

__all__ = ["SectionError", "number", "count", "text", "flag", "numbers", "integers", "flags",
           "texts", "by_name", "nested", "of_numbers", "mapping"]


class SectionError(ValueError):
    """A section of the statistics that does not have the shape its class reads."""


def number(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if not is_number(value):
        raise SectionError(f"{where}: {key} is {value!r}, not a number")
    return float(value)


def count(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SectionError(f"{where}: {key} is {value!r}, not a count")
    return value


def text(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise SectionError(f"{where}: {key} is {value!r}, not text")
    return value


def flag(obj: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise SectionError(f"{where}: {key} is {value!r}, not true or false")
    return value


def numbers(obj: Mapping[str, Any], key: str, where: str) -> tuple[float | None, ...]:
    values = obj.get(key) or ()
    if not isinstance(values, list | tuple) or not all(v is None or is_number(v)
                                                       for v in values):
        raise SectionError(f"{where}: {key} is {values!r}, not a list of numbers")
    return tuple(None if v is None else float(v) for v in values)


def texts(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    values = obj.get(key) or ()
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise SectionError(f"{where}: {key} is {values!r}, not a list of names")
    return tuple(values)


def by_name(obj: Mapping[str, Any], key: str, where: str,
             read: Any = None) -> Mapping[str, Any]:
    """``obj[key]``, a mapping of name -> number (``read``: the reader of each value,
    ``number`` by default), read-only."""
    table = mapping(obj.get(key) or {}, f"{where} {key}")
    read = read or number
    return MappingProxyType({name: read(table, name, f"{where} {key}") for name in table})


def nested(obj: object, where: str, read: Any) -> Mapping[str, Mapping[str, Any]]:
    """``obj`` (outer name -> inner name -> value) with each value read by
    ``read(value, where)``, read-only."""
    return MappingProxyType({
        outer: MappingProxyType({
            inner: read(value, f"{where} of {outer} {inner}")
            for inner, value in mapping(table, f"{where} of {outer}").items()})
        for outer, table in mapping(obj, where).items()})


def of_numbers(cls: Any, obj: object, where: str) -> Any:
    """An instance of the dataclass ``cls`` whose every field is a number (or ``None``),
    read from the object ``obj``."""
    obj = mapping(obj, where)
    return cls(**{f.name: number(obj, f.name, where) for f in fields(cls)})


def mapping(obj: object, where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise SectionError(f"{where} is {type(obj).__name__}, not an object")
    return obj


def integers(obj: Mapping[str, Any], key: str, where: str) -> tuple[int | None, ...]:
    """``obj[key]``, a list of whole numbers (``None`` allowed), as a tuple."""
    values = obj.get(key) or ()
    if not isinstance(values, list | tuple) or not all(
            v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in values):
        raise SectionError(f"{where}: {key} is {values!r}, not a list of whole numbers")
    return tuple(values)


def flags(obj: Mapping[str, Any], key: str, where: str) -> tuple[bool | None, ...]:
    """``obj[key]``, a list of true/false (``None`` allowed), as a tuple."""
    values = obj.get(key) or ()
    if not isinstance(values, list | tuple) or not all(v is None or isinstance(v, bool)
                                                       for v in values):
        raise SectionError(f"{where}: {key} is {values!r}, not a list of true or false")
    return tuple(values)
