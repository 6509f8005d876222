"""The text ``.param`` parser: ncnn's format, with every malformed input named by file and line.

Format (ncnn ``Net::load_param``): magic 7767517, then ``layer_count blob_count``, then one line
per layer: ``Type Name in_count out_count bottoms... tops... id=value ...``. A value with '.',
'e' or 'E' is a float, else an int; one starting with a letter or '"' is a string; ``a,b,c``
is an array (modern syntax) and ``-233XX=n,a,b`` the old array syntax for id XX.
"""

from __future__ import annotations

import io
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._errors import ModelFormatError
from ._paramdict import ParamDict, ParamValue

MAGIC = 7767517
MAX_PARAM_ID = 31
MAX_STRING = 255


@dataclass(frozen=True)
class LayerDecl:
    type: str
    name: str
    bottoms: tuple[str, ...]
    tops: tuple[str, ...]
    params: ParamDict
    line: int


@dataclass(frozen=True)
class ParamFile:
    layers: tuple[LayerDecl, ...]
    blob_names: tuple[str, ...]
    source: str

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t for layer in self.layers if layer.type == "Input" for t in layer.tops)

    @property
    def output_names(self) -> tuple[str, ...]:
        consumed = {b for layer in self.layers for b in layer.bottoms}
        return tuple(b for b in self.blob_names if b not in consumed)


def parse_param(
    source: str | os.PathLike[str] | bytes | IO[Any],
    *,
    known_types: Collection[str] | None = None,
) -> ParamFile:
    """Parse a text .param from a path, its bytes, or a file object."""
    name = "<bytes>"
    try:
        if isinstance(source, (str, os.PathLike)):
            name = str(source)
            raw: bytes | str = Path(source).read_bytes()
        elif isinstance(source, (bytes, bytearray, memoryview)):
            raw = bytes(source)
        else:
            name = str(getattr(source, "name", "<file>"))
            raw = source.read()
    except OSError as exc:
        raise ModelFormatError(f"cannot read: {exc.strerror or exc}", file=name) from exc
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ModelFormatError(
                f"not a text .param file (byte {exc.start} is not UTF-8; binary .param.bin "
                "files are not supported)",
                file=name,
            ) from None
    else:
        text = raw
    return parse_param_text(text, name, known_types=known_types)


def _number(token: str, *, where: dict[str, Any], what: str) -> int | float:
    try:
        if any(ch in token for ch in ".eE"):
            return float(token)
        return int(token)
    except ValueError:
        raise ModelFormatError(f"{what}: {token!r} is not a number", **where) from None


def _value(token: str, where: dict[str, Any], key: int) -> ParamValue:
    if not token:
        raise ModelFormatError(f"param {key} has an empty value", **where)
    if token[0].isalpha() or token[0] == '"':
        text = token.strip('"')
        if len(text) > MAX_STRING:
            raise ModelFormatError(f"param {key}: string longer than {MAX_STRING}", **where)
        return text
    if "," in token:
        items = [_number(t, where=where, what=f"param {key}") for t in token.split(",") if t]
        if any(isinstance(v, float) for v in items):
            return tuple(float(v) for v in items)
        return tuple(int(v) for v in items)
    return _number(token, where=where, what=f"param {key}")


def _params(tokens: list[str], where: dict[str, Any]) -> ParamDict:
    values: dict[int, ParamValue] = {}
    for token in tokens:
        key_text, eq, value_text = token.partition("=")
        if not eq:
            raise ModelFormatError(f"expected id=value, got {token!r}", **where)
        try:
            key = int(key_text)
        except ValueError:
            raise ModelFormatError(f"param id {key_text!r} is not an integer", **where) from None
        if key <= -23300:
            key = -key - 23300
            items = [
                _number(t, where=where, what=f"param {key}") for t in value_text.split(",") if t
            ]
            if not items or not isinstance(items[0], int) or items[0] != len(items) - 1:
                raise ModelFormatError(
                    f"param {key}: old-style array declares {items[0] if items else 0} values, "
                    f"has {max(len(items) - 1, 0)}",
                    **where,
                )
            body = items[1:]
            value: ParamValue = (
                tuple(float(v) for v in body)
                if any(isinstance(v, float) for v in body)
                else tuple(int(v) for v in body)
            )
        else:
            value = _value(value_text, where, key)
        if not 0 <= key <= MAX_PARAM_ID:
            raise ModelFormatError(f"param id {key} out of range 0..{MAX_PARAM_ID}", **where)
        if key in values:
            raise ModelFormatError(f"param {key} given twice", **where)
        values[key] = value
    return ParamDict(values)


def parse_param_text(
    text: str, source: str = "<text>", *, known_types: Collection[str] | None = None
) -> ParamFile:
    lines = [(n, line.split()) for n, line in enumerate(io.StringIO(text), start=1)]
    lines = [(n, tokens) for n, tokens in lines if tokens]
    if not lines:
        raise ModelFormatError("empty .param file", file=source)
    n, tokens = lines[0]
    if tokens != [str(MAGIC)]:
        raise ModelFormatError(
            f"bad magic {' '.join(tokens)!r} (expected {MAGIC})", file=source, line=n
        )
    if len(lines) < 2:
        raise ModelFormatError("missing the layer/blob count line", file=source, line=n + 1)
    n, tokens = lines[1]
    if len(tokens) != 2:
        raise ModelFormatError("expected 'layer_count blob_count'", file=source, line=n)
    counts = [_number(t, where={"file": source, "line": n}, what="count") for t in tokens]
    if any(not isinstance(c, int) or c <= 0 for c in counts):
        raise ModelFormatError(
            f"layer and blob counts must be positive integers, got {tokens}", file=source, line=n
        )
    layer_count, blob_count = int(counts[0]), int(counts[1])
    body = lines[2:]
    if len(body) != layer_count:
        raise ModelFormatError(
            f"declares {layer_count} layers but has {len(body)} layer lines",
            file=source,
            line=lines[1][0],
        )
    layers: list[LayerDecl] = []
    produced: dict[str, int] = {}
    blob_names: list[str] = []
    names: set[str] = set()
    for n, tokens in body:
        where: dict[str, Any] = {"file": source, "line": n}
        if len(tokens) >= 2:
            where["layer"] = tokens[1]
        if len(tokens) < 4:
            raise ModelFormatError("expected 'Type Name in_count out_count ...'", **where)
        kind, name = tokens[0], tokens[1]
        where["layer"] = name
        try:
            n_in, n_out = int(tokens[2]), int(tokens[3])
        except ValueError:
            raise ModelFormatError(
                f"input/output counts {tokens[2]!r} {tokens[3]!r} are not integers", **where
            ) from None
        if n_in < 0 or n_out < 0:
            raise ModelFormatError("input/output counts must not be negative", **where)
        if len(tokens) < 4 + n_in + n_out:
            raise ModelFormatError(
                f"expects {n_in} input and {n_out} output blob names, line ends early", **where
            )
        bottoms = tuple(tokens[4 : 4 + n_in])
        tops = tuple(tokens[4 + n_in : 4 + n_in + n_out])
        if any("=" in b for b in bottoms + tops):
            raise ModelFormatError("a blob name contains '=' (counts and names disagree)", **where)
        if known_types is not None and kind not in known_types:
            raise ModelFormatError(f"unknown layer type {kind!r}", **where)
        if name in names:
            raise ModelFormatError(f"duplicate layer name {name!r}", **where)
        names.add(name)
        for b in bottoms:
            if b not in produced:
                raise ModelFormatError(
                    f"input blob {b!r} is not produced by an earlier layer", **where
                )
        for t in tops:
            if t in produced:
                raise ModelFormatError(f"blob {t!r} is produced twice", **where)
            produced[t] = n
            blob_names.append(t)
        params = _params(tokens[4 + n_in + n_out :], where)
        layers.append(LayerDecl(kind, name, bottoms, tops, params, n))
    if len(blob_names) != blob_count:
        raise ModelFormatError(
            f"declares {blob_count} blobs but the layers produce {len(blob_names)}",
            file=source,
            line=lines[1][0],
        )
    return ParamFile(tuple(layers), tuple(blob_names), source)
