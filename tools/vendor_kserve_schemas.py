"""Copy KServe's published CRD schemas into ``tests/data/kserve/``, trimmed, for
``tests/test_kserve_manifests.py`` to check ``deploy/kserve/`` without a cluster.

Maintainer tool: CI runs neither it nor anything needing a KServe checkout; its outputs are
committed. From a clone of https://github.com/kserve/kserve (any branch: the files are read
from the tag)::

    python tools/vendor_kserve_schemas.py KSERVE_CLONE [--tag v0.20.0]

For each CRD it takes the ``openAPIV3Schema`` of the version the manifests use, from
``config/crd/full/`` at the tag, and writes it with where it came from. The InferenceService
schema is 0.6 MB, most of it the other components' and model frameworks' copies of a pod's
container; those properties are replaced by ``false`` (a manifest that uses one is refused,
never passed unchecked) and named in the file's ``trimmed`` list.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "kserve"

#: (file in config/crd/full/, API version, what to trim: dotted paths of properties)
CRDS = {
    "servingruntime": ("serving.kserve.io_servingruntimes.yaml", "v1alpha1", ()),
    "inferenceservice": (
        "serving.kserve.io_inferenceservices.yaml",
        "v1beta1",
        (
            "spec.canary",
            "spec.explainer",
            "spec.transformer",
            *(
                f"spec.predictor.{name}"
                for name in (
                    "huggingface lightgbm onnx paddle pmml pytorch sklearn tensorflow triton"
                    " xgboost workerSpec"
                ).split()
            ),
            "status",
        ),
    ),
}


def trim(schema: dict[str, Any], path: str) -> None:
    """Replace the property at dotted ``path`` by ``false``; KeyError names a missing step."""
    node = schema
    *parents, last = path.split(".")
    for step in parents:
        node = node["properties"][step]
    if last not in node["properties"]:
        raise KeyError(f"{path}: no property {last!r} in the schema")
    node["properties"][last] = False


def vendor(clone: Path, tag: str, kind: str) -> Path:
    """Write ``OUT/KIND.json`` from the clone's CRD at ``tag``."""
    file, version, trimmed = CRDS[kind]
    source = f"config/crd/full/{file}"
    text = subprocess.run(
        ["git", "-C", str(clone), "show", f"{tag}:{source}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    crd = yaml.safe_load(text)
    (entry,) = (v for v in crd["spec"]["versions"] if v["name"] == version)
    schema = entry["schema"]["openAPIV3Schema"]
    for path in trimmed:
        trim(schema, path)
    document = {
        "source": f"kserve/kserve {tag} {source}",
        "group": crd["spec"]["group"],
        "version": version,
        "kind": crd["spec"]["names"]["kind"],
        "trimmed": list(trimmed),
        "openAPIV3Schema": schema,
    }
    out = OUT / f"{kind}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=0, sort_keys=True) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("clone", type=Path, help="a git clone of kserve/kserve")
    parser.add_argument("--tag", default="v0.20.0", help="the KServe release (default: v0.20.0)")
    args = parser.parse_args()
    for kind in CRDS:
        out = vendor(args.clone, args.tag, kind)
        print(f"{out}: {out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
