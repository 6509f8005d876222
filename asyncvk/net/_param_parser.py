"""The text ``.param`` parser: ncnn's format, with every malformed input named by file and line.

Format (ncnn ``Net::load_param`` and ``ParamDict::load_param``)::

    7767517
    layer_count blob_count
    Type Name in_count out_count bottom... top... id=value ...

The ``id=value`` pairs and their type rules are read by ``_param_values``; this module reads
the file, its header and the layer lines, and checks the graph they form.

ncnn scans the file as a stream of whitespace-separated tokens; this parser reads it line by
line instead (one layer per line, blank lines and extra spaces ignored), so that every error
can name its line. Whatever the input, the only exception raised is ``ModelFormatError``.

Counts, as ncnn: lines past the declared layer count are ignored (with a logged warning);
fewer lines than declared, or more blobs than declared, are errors; fewer blobs than declared
are accepted (warned).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import IO, Any

from .._errors import ModelFormatError
from ..layers._paramdict import ParamDict
from ._model_source import read_model_file
from ._param_values import FEATMASK_ID as FEATMASK_ID
from ._param_values import MAX_STRING, TOKEN, WS, Where, parse_int, parse_params
from ._param_values import SHAPE_HINTS_ID as SHAPE_HINTS_ID

MAGIC = 7767517
_BINARY_MAGIC = MAGIC.to_bytes(4, "little")

log = logging.getLogger("asyncvk.net")


@dataclass(frozen=True)
class LayerDecl:
    """One layer line, as written: the graph is checked, the parameters are not interpreted."""

    type: str
    name: str
    bottoms: tuple[str, ...]
    tops: tuple[str, ...]
    params: ParamDict
    #: 1-based line number in the file, for errors raised later (load_param, load_model).
    line: int


@dataclass(frozen=True)
class ParamFile:
    """A parsed ``.param``: layers in file order, each blob produced once before it is used."""

    layers: tuple[LayerDecl, ...]
    #: Every blob, in order of first appearance as a top (ncnn's blob index order).
    blob_names: tuple[str, ...]
    #: The file name, or "<bytes>" / "<text>" when there is none.
    source: str

    @property
    def input_names(self) -> tuple[str, ...]:
        """Blobs produced by ``Input`` layers: what a caller must feed."""
        return tuple(t for layer in self.layers if layer.type == "Input" for t in layer.tops)

    @property
    def output_names(self) -> tuple[str, ...]:
        """Blobs produced but never consumed: what a caller can usefully extract."""
        consumed = {b for layer in self.layers for b in layer.bottoms}
        return tuple(b for b in self.blob_names if b not in consumed)


def parse_param(
    source: str | os.PathLike[str] | bytes | bytearray | IO[bytes] | IO[str],
    *,
    known_types: Collection[str] | None = None,
) -> ParamFile:
    """Parse a text ``.param`` from a path (``str`` or PathLike), its bytes, or a file object.

    ``known_types``, when given, rejects layer types outside it, so a model that cannot run is
    refused at parse time, naming every such type with its lines.
    """
    name, raw = read_model_file(source, ".param", text=True)
    text = raw if isinstance(raw, str) else _decode(raw, name)
    return parse_param_text(text, name, known_types=known_types)


def parse_param_text(
    text: str, source: str, *, known_types: Collection[str] | None = None
) -> ParamFile:
    """Parse the content of a text ``.param``; ``source`` names it in errors."""
    try:
        return _parse_param_text(text, source, known_types)
    except ModelFormatError:
        raise
    except Exception as exc:  # a parser bug still names the file, never escapes raw
        raise model_error(exc, file=source) from exc


def model_error(
    exc: BaseException, *, file: str, line: int | None = None, layer: str | None = None
) -> ModelFormatError:
    """``exc`` from code reading a model, as the ModelFormatError the user sees.

    A ValueError or TypeError is a layer refusing a value and keeps its message; anything else
    is a bug met on this model, named as one. Callers let a ModelFormatError through as it is
    and raise the result ``from exc``, so the cause stays chained.
    """
    if isinstance(exc, (ValueError, TypeError)):
        message = str(exc)
    else:
        message = f"internal error while reading the model: {type(exc).__name__}: {exc}"
    return ModelFormatError(message, file=file, line=line, layer=layer)


def _parse_param_text(text: str, source: str, known_types: Collection[str] | None) -> ParamFile:
    text = text.removeprefix("\ufeff")
    lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip(WS)]
    if not lines:
        raise ModelFormatError("empty .param file", file=source)
    for n, line in lines:
        if "\0" in line:
            raise ModelFormatError("not a text .param file (NUL character)", file=source, line=n)
    _check_magic(lines[0], source)
    if len(lines) < 2:
        raise ModelFormatError(
            "missing the 'layer_count blob_count' line", file=source, line=lines[0][0] + 1
        )
    counts_line = lines[1][0]
    layer_count, blob_count = _counts(lines[1], source)
    body = lines[2:]
    if len(body) < layer_count:
        raise ModelFormatError(
            f"declares {layer_count} layers but has only {len(body)} layer lines (truncated file?)",
            file=source,
            line=counts_line,
        )
    if len(body) > layer_count:
        _warn_ignored_lines(body[layer_count:], layer_count, counts_line, source)
        body = body[:layer_count]
    graph = _Graph(source, known_types)
    # Networks repeat their layers' params (RRDB: 950 layers, 13 distinct texts); a ParamDict
    # is frozen, so equal texts share one parse. Only successful parses are kept.
    parsed: dict[str, ParamDict] = {}
    for n, line in body:
        graph.add(_parse_layer(line, Where(source, n), parsed))
    graph.check_types()
    _check_blob_count(graph, blob_count, counts_line)
    return ParamFile(tuple(graph.layers), tuple(graph.blob_names), source)


def _warn_ignored_lines(
    extra: list[tuple[int, str]], layer_count: int, counts_line: int, source: str
) -> None:
    """ncnn reads the declared number of layers and never looks further; so does asyncvk, but
    says so, since a layer the author meant to keep may sit there (nanodet_m ends with one)."""
    first_line, first = extra[0]
    s = "" if len(extra) == 1 else "s"
    log.warning(
        "%s:%d: ignoring %d layer line%s after the %d declared on line %d, starting with %r "
        "(ncnn ignores them too)",
        source,
        first_line,
        len(extra),
        s,
        layer_count,
        counts_line,
        " ".join(TOKEN.findall(first))[:60],
    )


def _check_blob_count(graph: _Graph, blob_count: int, counts_line: int) -> None:
    """ncnn sizes its blob table from the declared count: a layer producing more blobs than
    that fails there ("too many blobs"), while unused slots are harmless. Same here."""
    produced = len(graph.blob_names)
    if produced > blob_count:
        first_over = graph.producer[graph.blob_names[blob_count]]
        raise ModelFormatError(
            f"declares {blob_count} blobs (line {counts_line}) but the layers produce "
            f"{produced}; blob {graph.blob_names[blob_count]!r} is number {blob_count + 1}",
            file=graph.source,
            line=first_over.line,
            layer=first_over.name,
        )
    if produced < blob_count:
        log.warning(
            "%s:%d: declares %d blobs but the layers produce %d (ncnn leaves the rest unused)",
            graph.source,
            counts_line,
            blob_count,
            produced,
        )


# -- reading the source ------------------------------------------------------------------------


def _decode(raw: bytes, name: str) -> str:
    if raw.startswith(_BINARY_MAGIC):
        raise ModelFormatError(
            "binary .param.bin files are not supported; use the text .param", file=name
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ModelFormatError(
            f"not a text .param file (byte 0x{raw[exc.start]:02x} at offset {exc.start} "
            "is not UTF-8)",
            file=name,
            line=line,
        ) from None


# -- header ------------------------------------------------------------------------------------


def _check_magic(first: tuple[int, str], source: str) -> None:
    n, line = first
    if TOKEN.findall(line) != [str(MAGIC)]:
        raise ModelFormatError(
            f"bad magic {line.strip(WS)[:40]!r} (a text .param starts with {MAGIC})",
            file=source,
            line=n,
        )


def _counts(counts: tuple[int, str], source: str) -> tuple[int, int]:
    n, line = counts
    tokens = TOKEN.findall(line)
    ints = [parse_int(t) for t in tokens]
    if len(ints) != 2 or ints[0] is None or ints[1] is None:
        raise ModelFormatError(
            f"bad counts line {line.strip(WS)[:40]!r} (expected 'layer_count blob_count')",
            file=source,
            line=n,
        )
    layer_count, blob_count = ints[0], ints[1]
    if layer_count <= 0 or blob_count <= 0:
        raise ModelFormatError(
            f"layer_count and blob_count must be positive, got {layer_count} {blob_count}",
            file=source,
            line=n,
        )
    return layer_count, blob_count


# -- one layer line ----------------------------------------------------------------------------


def _parse_layer(line: str, where: Where, parsed: dict[str, ParamDict]) -> LayerDecl:
    matches = list(TOKEN.finditer(line))
    tokens = [m.group() for m in matches]
    if len(tokens) >= 2:
        where.layer = tokens[1]
    if len(tokens) < 4:
        where.fail(f"expected 'Type Name in_count out_count ...', got {line.strip(WS)[:60]!r}")
    kind, name, in_text, out_text = tokens[:4]
    for what, text in (("layer type", kind), ("layer name", name)):
        if len(text) > MAX_STRING:
            where.fail(f"{what} longer than {MAX_STRING} characters")
    n_in = _count(in_text, "input", where)
    n_out = _count(out_text, "output", where)
    end = 4 + n_in + n_out
    names = tokens[4:end]
    missing = next((i for i, t in enumerate(names) if "=" in t), len(names))
    if missing < n_in + n_out:
        found = f"param {names[missing]!r}" if missing < len(names) else "the end of the line"
        where.fail(
            f"missing blob names: expects {n_in} input and {n_out} output names, "
            f"found {found} after {missing} of them"
        )
    for blob in names:
        if len(blob) > MAX_STRING:
            where.fail(f"blob name longer than {MAX_STRING} characters")
    params_start = matches[end - 1].end()
    text = line[params_start:]
    params = parsed.get(text)
    if params is None:
        params = parsed[text] = parse_params(line, params_start, where)
    return LayerDecl(kind, name, tuple(names[:n_in]), tuple(names[n_in:]), params, where.line)


def _count(text: str, what: str, where: Where) -> int:
    value = parse_int(text)
    if value is None:
        where.fail(f"{what} count {text!r} is not an integer")
    if value < 0:
        where.fail(f"{what} count {value} is negative")
    return value


# -- the graph ---------------------------------------------------------------------------------


class _Graph:
    """Checks each layer against those before it: blobs produced once, before they are read.

    Layer names may repeat, as ncnn allows (pnnx names the Split of a constant blob
    ``splitncnn_0`` again): a layer is found by its place, and errors give its line too."""

    def __init__(self, source: str, known_types: Collection[str] | None) -> None:
        self.source = source
        self.known_types = known_types
        self.layers: list[LayerDecl] = []
        self.blob_names: list[str] = []
        self.producer: dict[str, LayerDecl] = {}
        #: Layers whose type is not in known_types, by type in order of first appearance.
        self.unsupported: dict[str, list[LayerDecl]] = {}

    def add(self, decl: LayerDecl) -> None:
        where: dict[str, Any] = {"file": self.source, "line": decl.line, "layer": decl.name}
        if self.known_types is not None and decl.type not in self.known_types:
            self.unsupported.setdefault(decl.type, []).append(decl)
        for blob in decl.bottoms:
            if blob not in self.producer:
                raise ModelFormatError(
                    f"unknown blob {blob!r}: not produced by an earlier layer", **where
                )
        for blob in decl.tops:
            earlier = self.producer.get(blob)
            if earlier is not None:
                raise ModelFormatError(
                    f"blob {blob!r} is produced twice (first by layer {earlier.name!r} "
                    f"on line {earlier.line})",
                    **where,
                )
            self.producer[blob] = decl
            self.blob_names.append(blob)
        self.layers.append(decl)

    def check_types(self) -> None:
        """Name every unsupported type at once, each with its lines, so that one attempt
        shows all that a model needs (not one type per try)."""
        if not self.unsupported:
            return
        assert self.known_types is not None  # only then is anything unsupported
        import difflib  # here: only this error's hint needs it

        by_lower = {t.lower(): t for t in self.known_types}
        parts = []
        for kind, decls in self.unsupported.items():
            lines = ", ".join(str(d.line) for d in decls)
            where = f"line{'s' if len(decls) > 1 else ''} {lines}"
            close = difflib.get_close_matches(kind.lower(), list(by_lower), n=1)
            hint = f"; did you mean {by_lower[close[0]]!r}?" if close else ""
            parts.append(f"{kind} ({where}{hint})")
        s = "s" if len(parts) > 1 else ""
        decls = [d for found in self.unsupported.values() for d in found]
        only = decls[0] if len(decls) == 1 else None  # one line: name it as other errors do
        raise ModelFormatError(
            f"unsupported layer type{s}: {', '.join(parts)}",
            file=self.source,
            line=only.line if only else None,
            layer=only.name if only else None,
        )


__all__ = ("LayerDecl", "ParamFile", "model_error", "parse_param", "parse_param_text")
