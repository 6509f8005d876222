"""LoadStatistics: where a load's time went, as ``Net.load_stats`` reports it."""

from __future__ import annotations

from dataclasses import dataclass

from ._gpu_model import GpuModel


@dataclass(frozen=True)
class LoadStatistics:
    """How long each step of the last ``load_param``/``load_model`` took (seconds), and what the
    load made: pipelines requested, shape-baked pipelines, layers on the GPU and the CPU."""

    load_param_s: float = 0.0
    load_model_s: float = 0.0
    read_weights_s: float = 0.0
    pipelines_s: float = 0.0
    upload_s: float = 0.0
    pipelines_requested: int = 0
    shape_baked_pipelines: int = 0
    gpu_layers: int = 0
    cpu_layers: int = 0
    #: The weights came from a read started before the load (the CLI's, at its first lines).
    weights_read_early: bool = False


def load_statistics(
    load_param_s: float,
    load_model_s: float,
    read_s: float,
    read_early: bool,
    layers: int,
    gpu: GpuModel | None,
) -> LoadStatistics:
    """A load's statistics: its clocks, and what its GpuModel (None on the CPU) counted."""
    times = gpu.load_times if gpu is not None else None
    gpu_layers = len(gpu.bound) if gpu is not None else 0
    return LoadStatistics(
        load_param_s=load_param_s,
        load_model_s=load_model_s,
        read_weights_s=read_s,
        pipelines_s=times.pipelines_s if times else 0.0,
        upload_s=times.upload_s if times else 0.0,
        pipelines_requested=times.pipelines_requested if times else 0,
        shape_baked_pipelines=times.shape_baked_pipelines if times else 0,
        gpu_layers=gpu_layers,
        cpu_layers=layers - gpu_layers,
        weights_read_early=read_early,
    )
