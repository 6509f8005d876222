"""``deploy/kserve/``, checked without a cluster.

Each manifest against KServe's published CRD schema (``tests/data/kserve/``), applied as the
API server applies it (``tests/kube_schema.py``); then in step with ``asyncvk serve``: the
container's command line parsed by the CLI's own parser, its ports, model paths, cache variables
and probe paths against what asyncvk reads and answers; last, the command line run as KServe
would run it, on a folder shaped as the storage initializer fills ``/mnt/models``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from kube_schema import CrdSchema, UnsupportedSchema, api_server_schema
from redis_server import RedisServer, free_port
from served_process import wait_until_ready

from asyncvk.cache._remote_store import parse_remote_url
from asyncvk.cache._remote_tier_link import KEY_VARIABLE
from asyncvk.cache._remote_url import URL_VARIABLE
from asyncvk.cache._safe_fs import TRUST_OWNER_ENV
from asyncvk.cli._parser import build_parser
from asyncvk.cli._run import check_cache_folder_args, check_remote_cache_arg
from asyncvk.cli._runner import parse_input_shape
from asyncvk.serve import create_app
from asyncvk.serve._repository import check_name

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "kserve"
SCHEMAS = Path(__file__).parent / "data" / "kserve"
CUNET = Path(__file__).parent / "models" / "cunet"
MANIFESTS = ("servingruntime", "inferenceservice")

#: where KServe's storage initializer copies the storageUri's files, in the model's container
KSERVE_MODEL_DIR = "/mnt/models"
#: the ports of a KServe v2 runtime: HTTP (KServe routes to it) and gRPC (its model server's)
KSERVE_HTTP_PORT, KSERVE_GRPC_PORT = 8080, 8081


def manifest(name: str) -> Any:
    return yaml.safe_load((DEPLOY / f"{name}.yaml").read_text())


@pytest.fixture(scope="module")
def runtime() -> Any:
    return manifest("servingruntime")


@pytest.fixture(scope="module")
def service() -> Any:
    return manifest("inferenceservice")


def container(runtime: Any) -> Any:
    """The runtime's model container: KServe merges the InferenceService's model into it."""
    (found,) = [c for c in runtime["spec"]["containers"] if c["name"] == "kserve-container"]
    return found


def env(runtime: Any) -> dict[str, Any]:
    return {e["name"]: e for e in container(runtime)["env"]}


def port(ports: list[Any], name: str) -> int:
    (found,) = [p["containerPort"] for p in ports if p["name"] == name]
    return int(found)


def command_line(runtime: Any, service: Any) -> list[str]:
    """The model container's command line as KServe makes it: the runtime's command and args,
    the InferenceService's args after them, ``{{.Name}}`` replaced by the service's name."""
    c = container(runtime)
    words = [
        *c["command"],
        *c.get("args", ()),
        *service["spec"]["predictor"]["model"].get("args", ()),
    ]
    return [w.replace("{{.Name}}", service["metadata"]["name"]) for w in words]


def parse(words: list[str]) -> argparse.Namespace:
    """``words`` read by the ``asyncvk`` command's own parser; a refusal fails with its message."""
    assert words[0] == "asyncvk", f"the container runs {words[0]!r}, not the asyncvk command"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return build_parser().parse_args(words[1:])
        except SystemExit:
            pytest.fail(f"asyncvk refuses the manifest's command line {words}:\n{err.getvalue()}")


@pytest.fixture(scope="module")
def args(runtime: Any, service: Any) -> argparse.Namespace:
    return parse(command_line(runtime, service))


# -- the schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_matches_kserves_crd(name: str) -> None:
    schema = CrdSchema(SCHEMAS / f"{name}.json")
    assert schema.problems(manifest(name)) == []


def _set(document: Any, path: tuple[str | int, ...], value: Any) -> Any:
    """A copy of ``document`` with ``path`` set to ``value`` (an index one past a list's end
    appends)."""
    out = copy.deepcopy(document)
    *parents, last = path
    node = out
    for step in parents:
        node = node[step]
    if isinstance(node, list) and last == len(node):
        node.append(value)
    else:
        node[last] = value
    return out


C = ("spec", "containers", 0)
MISTAKES = {
    "an unknown field": ((*C, "readinesProbe"), {}, "readinesProbe"),
    "a port as a string": ((*C, "ports", 0, "containerPort"), "8080", "containerPort"),
    "a port beyond int32": ((*C, "ports", 0, "containerPort"), 2**31, "int32"),
    "a float quantity": ((*C, "resources", "limits", "nvidia.com/gpu"), 0.5, "neither an integer"),
    "a port twice": ((*C, "ports", 1), {"containerPort": 8080}, "same containerPort"),
    "an annotation that is a number": (("metadata", "annotations"), {"a": 1}, "annotations.a"),
    "a name no host may have": (("metadata", "name"), "AsyncVK", "metadata.name"),
    "another API version": (("apiVersion",), "serving.kserve.io/v1beta1", "apiVersion"),
    "a format with no name": (("spec", "supportedModelFormats", 0), {"version": "1"}, "'name'"),
}


@pytest.mark.parametrize("path, value, said", MISTAKES.values(), ids=MISTAKES)
def test_the_schema_check_refuses_a_mistake(path: tuple[Any, ...], value: Any, said: str) -> None:
    schema = CrdSchema(SCHEMAS / "servingruntime.json")
    problems = schema.problems(_set(manifest("servingruntime"), path, value))
    assert any(said in p for p in problems), problems


def test_a_trimmed_property_is_refused_and_said_so() -> None:
    schema = CrdSchema(SCHEMAS / "inferenceservice.json")
    (problem,) = schema.problems(_set(manifest("inferenceservice"), ("spec", "transformer"), {}))
    assert problem.startswith("spec.transformer: ") and "trimmed" in problem


def test_a_schema_keyword_not_applied_is_an_error() -> None:
    with pytest.raises(UnsupportedSchema, match=r"\.spec: .*x-kubernetes-validations"):
        api_server_schema(
            {"type": "object", "properties": {"spec": {"x-kubernetes-validations": []}}}
        )
    with pytest.raises(UnsupportedSchema, match="format 'cidr'"):
        api_server_schema({"type": "string", "format": "cidr"})


# -- in step with asyncvk serve -----------------------------------------------------------------


def test_the_command_line_is_one_asyncvk_serve_accepts(args: argparse.Namespace) -> None:
    assert args.command == "serve"
    check_cache_folder_args(args)  # the checks cmd_serve makes before it loads anything
    check_remote_cache_arg(args)
    check_name(args.name, "--name")
    for shape in args.warm_up:
        parse_input_shape(shape)


def test_the_ports_are_kserves(runtime: Any, service: Any, args: argparse.Namespace) -> None:
    assert args.host == "0.0.0.0", "a server on loopback is unreachable from KServe's routes"
    assert args.port == KSERVE_HTTP_PORT == port(container(runtime)["ports"], "http1")
    ports = service["spec"]["predictor"]["model"]["ports"]
    assert port(ports, "http1") == args.port
    assert args.grpc_port == KSERVE_GRPC_PORT == port(ports, "grpc")  # "grpc": KServe's h2c
    assert {"v2", "grpc-v2"} <= set(runtime["spec"]["protocolVersions"])
    assert service["spec"]["predictor"]["model"]["protocolVersion"] in {"v2", "grpc-v2"}


def test_the_model_is_what_the_storage_initializer_fills(
    runtime: Any, service: Any, args: argparse.Namespace
) -> None:
    assert args.models is None
    assert args.param == f"{KSERVE_MODEL_DIR}/model.param"
    assert args.bin == f"{KSERVE_MODEL_DIR}/model.bin"
    assert args.name == args.graph_key == service["metadata"]["name"]
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert "ncnn" in formats and model["modelFormat"]["name"] in formats


def test_the_cache_is_configured_as_asyncvk_reads_it(
    runtime: Any, args: argparse.Namespace
) -> None:
    variables = env(runtime)
    assert args.remote_cache is None, "--remote-cache would hide the variable"
    parse_remote_url(variables[URL_VARIABLE]["value"], where=URL_VARIABLE)
    secret = variables[KEY_VARIABLE]["valueFrom"]["secretKeyRef"]
    assert secret["name"] and secret["key"]
    assert variables[TRUST_OWNER_ENV]["value"] == "1"  # an emptyDir is mode 0777
    (mount,) = [m for m in container(runtime)["volumeMounts"] if m["mountPath"] == args.cache_dir]
    (volume,) = [v for v in runtime["spec"]["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" in volume


def test_the_probes_ask_what_the_server_answers(runtime: Any, args: argparse.Namespace) -> None:
    app = create_app(str(CUNET / "model.param"), str(CUNET / "model.bin"))
    routes = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}
    for probe in ("readinessProbe", "livenessProbe"):
        get = container(runtime)[probe]["httpGet"]
        assert ("GET", get["path"]) in routes, f"{probe}: the server has no GET {get['path']}"
        assert get["port"] == args.port
    assert container(runtime)["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"


def test_the_gpu_is_reachable_through_vulkan(runtime: Any) -> None:
    assert container(runtime)["resources"]["limits"]["nvidia.com/gpu"] == 1
    capabilities = env(runtime)["NVIDIA_DRIVER_CAPABILITIES"]["value"].split(",")
    assert {"graphics", "compute", "utility"} <= set(capabilities)  # graphics: the Vulkan ICD


def test_the_image_holds_what_the_manifest_uses(runtime: Any, args: argparse.Namespace) -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    extras = {"grpc": args.grpc_port is not None, "remote": URL_VARIABLE in env(runtime)}
    (install,) = [line for line in dockerfile.splitlines() if "pip install" in line]
    for extra, needed in extras.items():
        assert not needed or extra in install.split("asyncvk-runtime[")[1].split("]")[0]
    assert f"--uid {container(runtime)['securityContext']['runAsUser']} " in dockerfile
    assert "mesa-vulkan-drivers" not in dockerfile  # lavapipe could be chosen over the GPU


# -- served as KServe runs it -------------------------------------------------------------------


def _as_here(words: list[str], mapping: dict[str, str]) -> list[str]:
    """``words`` with each of ``mapping``'s prefixes replaced: paths and ports of this machine."""
    out = []
    for word in words:
        for old, new in mapping.items():
            word = word.replace(old, new)
        out.append(word)
    return out


def _serve(words: list[str], variables: dict[str, str]) -> subprocess.Popen[str]:
    """``asyncvk serve`` started with ``words`` (the container's command line) and ``variables``
    (its environment) added to this process's."""
    assert words[0] == "asyncvk"
    return subprocess.Popen(
        [sys.executable, "-m", "asyncvk", *words[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **variables},
    )


async def test_served_as_kserve_runs_it(tmp_path: Path, runtime: Any, service: Any) -> None:
    import tritonclient.grpc.aio as grpcclient
    import tritonclient.http.aio as httpclient

    models = tmp_path / "mnt" / "models"  # the storageUri's folder, copied by KServe
    models.mkdir(parents=True)
    for file in ("model.param", "model.bin"):
        (models / file).write_bytes((CUNET / file).read_bytes())
    cache = tmp_path / "pipeline-cache"
    cache.mkdir()
    cache.chmod(0o777)  # as the kubelet makes an emptyDir
    redis = RedisServer(tmp_path)
    http, grpc = free_port(), free_port()
    (mount,) = container(runtime)["volumeMounts"]
    words = _as_here(
        command_line(runtime, service),
        {
            KSERVE_MODEL_DIR: str(models),
            mount["mountPath"]: str(cache),
            f"--port={KSERVE_HTTP_PORT}": f"--port={http}",
            f"--grpc-port={KSERVE_GRPC_PORT}": f"--grpc-port={grpc}",
        },
    )
    variables = {  # the manifest's, under its names: this Redis, and a value for the Secret's
        e["name"]: redis.url
        if e.get("value", "").startswith("redis://")
        else e.get("value", "a signing key")
        for e in container(runtime)["env"]
    }
    proc = _serve(words, variables)
    name = service["metadata"]["name"]
    x = np.load(CUNET / "input.npy")[np.newaxis]
    want = np.load(CUNET / "output.npy")
    try:
        probe = container(runtime)["readinessProbe"]["httpGet"]["path"]
        await wait_until_ready(proc, f"http://127.0.0.1:{http}{probe}")
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        try:
            data = httpclient.InferInput("in0", list(x.shape), "FP32")
            data.set_data_from_numpy(x, binary_data=True)
            got = (await client.infer(name, [data])).as_numpy("out0")
        finally:
            await client.close()
        assert got is not None
        assert np.linalg.norm(got[0] - want) < 1e-3 * np.linalg.norm(want)
        over_grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        try:
            assert await over_grpc.is_model_ready(name)
        finally:
            await over_grpc.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        stored = redis.client().dbsize()
        redis.stop()
    assert proc.returncode == 0, err
    assert "not trusted" not in err and "Warning" not in err, err
    assert list(cache.glob(f"{name}*.vkcache")), f"no pipeline cache saved in the emptyDir:\n{err}"
    assert stored > 0, f"nothing pushed to the Redis tier:\n{err}"
