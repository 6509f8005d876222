"""A custom resource checked as the Kubernetes API server checks it, with ``jsonschema``.

A CRD's ``openAPIV3Schema`` is a *structural* schema: close to JSON Schema draft 4, plus
``x-kubernetes-*`` keywords that JSON Schema ignores. Read as plain JSON Schema it would pass
most mistakes, so :func:`api_server_schema` rewrites it to what the API server enforces with
strict field validation (``kubectl apply``'s default since Kubernetes 1.27):

- an object that declares no ``additionalProperties`` and no
  ``x-kubernetes-preserve-unknown-fields`` refuses unknown fields (the server prunes them, and
  strict validation turns that into an error);
- ``x-kubernetes-int-or-string`` takes an integer or a string, whatever ``anyOf`` says;
- ``x-kubernetes-list-type: set`` lists hold no item twice, ``map`` lists no two items with the
  same ``x-kubernetes-list-map-keys`` (a missing key counted as its default);
- ``format: int32`` and ``int64`` are range checks, ``int-or-string`` and ``date-time`` what
  their names say; a format outside these is refused rather than skipped;
- ``metadata``, which a CRD leaves to the server, is checked for the fields the manifests use:
  a DNS label of a name, and labels and annotations whose values are strings;
- ``apiVersion`` and ``kind`` must be the CRD's.

``x-kubernetes-map-type`` and ``default`` only change how the server merges or fills a value, so
they check nothing. Any other keyword (a CEL rule, ``x-kubernetes-validations``, say) is refused
by :func:`api_server_schema`: a schema this module cannot apply whole is an error, not a pass.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator, FormatChecker, ValidationError, validators

#: The keywords applied: draft 4's, checked by jsonschema, and the Kubernetes ones, checked here.
KEYWORDS = frozenset(
    "type properties required items additionalProperties enum pattern format anyOf"
    " minimum maximum minLength maxLength minItems maxItems default description nullable"
    " x-kubernetes-int-or-string x-kubernetes-list-type x-kubernetes-list-map-keys"
    " x-kubernetes-map-type x-kubernetes-preserve-unknown-fields".split()
)

#: What a Kubernetes object's name may be here: an RFC 1035 label (InferenceService names
#: become host names, so KServe asks for this; any object may have one).
DNS_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
OBJECT_META: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": DNS_LABEL, "maxLength": 63},
        "namespace": {"type": "string", "pattern": DNS_LABEL, "maxLength": 63},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

FORMATS = FormatChecker(formats=())


@FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


@FORMATS.checks("int-or-string")
def _int_or_string_format(value: object) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    if isinstance(value, str):
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return True


class UnsupportedSchema(ValueError):
    """The schema uses a keyword or format this module does not apply."""


def api_server_schema(schema: Any, where: str = "") -> Any:
    """``schema`` rewritten to refuse what the API server refuses (see the module docstring);
    UnsupportedSchema names the first keyword or format it cannot apply, and where."""
    if schema is False:  # nothing: a trimmed property (draft 4 has no boolean schemas)
        return {"not": {}}
    if schema is True:
        return {}
    unknown = set(schema) - KEYWORDS
    if unknown:
        raise UnsupportedSchema(f"{where or 'the root'}: keywords not applied: {sorted(unknown)}")
    if "format" in schema and schema["format"] not in FORMATS.checkers:
        raise UnsupportedSchema(f"{where or 'the root'}: format {schema['format']!r} not applied")
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {
            name: api_server_schema(sub, f"{where}.{name}")
            for name, sub in out["properties"].items()
        }
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = api_server_schema(out[key], f"{where}[]")
    if "anyOf" in out:
        out["anyOf"] = [api_server_schema(sub, where) for sub in out["anyOf"]]
    if out.get("nullable"):
        out = {"anyOf": [{"type": "null"}, {k: v for k, v in out.items() if k != "nullable"}]}
    elif (
        out.get("type") == "object"
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _int_or_string(_: Any, on: bool, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if on and (isinstance(instance, bool) or not isinstance(instance, int | str)):
        yield ValidationError(f"{instance!r} is neither an integer nor a string")


def _list_type(_: Any, kind: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not isinstance(instance, list) or kind == "atomic":
        return
    if kind == "set":
        seen: list[Any] = []
        for item in instance:
            if item in seen:
                yield ValidationError(f"{item!r} is twice in a list of unique items")
            seen.append(item)
    elif kind == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        fields = schema.get("items", {}).get("properties", {})
        first: dict[tuple[Any, ...], int] = {}
        for index, item in enumerate(instance):
            if not isinstance(item, dict):
                continue  # the items' own schema says what is wrong
            key = tuple(item.get(k, fields.get(k, {}).get("default")) for k in keys)
            if key in first:
                yield ValidationError(
                    f"items {first[key]} and {index} have the same {'/'.join(keys)}: {key}"
                )
            first.setdefault(key, index)
    else:
        yield ValidationError(f"x-kubernetes-list-type {kind!r} is not atomic, set or map")


KubeValidator = validators.extend(
    Draft4Validator,
    {"x-kubernetes-int-or-string": _int_or_string, "x-kubernetes-list-type": _list_type},
)


class CrdSchema:
    """One vendored CRD schema (``tests/data/kserve/*.json``), ready to check manifests."""

    def __init__(self, path: Path) -> None:
        document = json.loads(path.read_text())
        self.source: str = document["source"]
        self.api_version = f"{document['group']}/{document['version']}"
        self.kind: str = document["kind"]
        #: properties the vendored copy replaced by ``false``: a manifest may not use them
        self.trimmed: list[str] = document["trimmed"]
        schema = api_server_schema(document["openAPIV3Schema"])
        schema["properties"]["metadata"] = OBJECT_META
        schema["properties"]["apiVersion"] = {"enum": [self.api_version]}
        schema["properties"]["kind"] = {"enum": [self.kind]}
        schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind"})
        KubeValidator.check_schema(schema)
        self.validator = KubeValidator(schema, format_checker=FORMATS)

    def problems(self, manifest: Any) -> list[str]:
        """Every way ``manifest`` breaks the schema, each as ``path: what``; [] when none."""
        found = []
        for error in sorted(self.validator.iter_errors(manifest), key=lambda e: list(e.path)):
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.path)
            dotted = path.lstrip(".")
            message = error.message
            if any(dotted == t or dotted.startswith((f"{t}.", f"{t}[")) for t in self.trimmed):
                message += f" (a property trimmed from the vendored copy of {self.source})"
            found.append(f"{dotted or '(root)'}: {message}")
        return found
