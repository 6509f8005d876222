"""RNN, LSTM and GRU as ncnn's rnn.cpp, lstm.cpp and gru.cpp: numpy on the CPU. On the GPU,
``recurrent_input.comp`` sums the input's part of every gate at every step at once, then one
``recurrent_step.comp`` dispatch per time step adds the hidden state's part for every
direction at once (each invocation one hidden unit; an LSTM with a projection adds a
``recurrent_project.comp`` dispatch), the hidden state ping-ponged between two float32 buffers.

The input is (T, size) (a 1-D (size,) blob is one step); the output is (T, num_output * dirs),
the directions side by side in each row. A second input gives the initial hidden state (and a
third the LSTM's cell state), (dirs, num_output) or, for one direction, (num_output,); more
outputs give the final states, in the shape of the state inputs or (dirs, num_output).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..gpu._memory import Buffer
from ._base import BlobCount, Layer, ModelBin, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._limits import MAX_BLOB_ELEMENTS, MAX_CHANNELS, check_elements
from ._recurrent_cells import (
    GRU_CELL,
    LSTM_CELL,
    RNN_CELL,
    CellKind,
    CellWeights,
    load_weights,
    run_direction,
)
from ._registry import register_layer
from ._schema import Param

_F32 = np.float32


def steps_and_size(type_name: str, shape: Shape) -> tuple[int, int]:
    """(T, size) of a recurrent layer's input: (T, size), or (size,) as one step."""
    if len(shape) == 1:
        return 1, shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    raise ValueError(f"{type_name} takes a dims 1 or 2 blob (T, size), got shape {tuple(shape)}")


def _columns(weights: np.ndarray) -> np.ndarray:
    """(dirs, rows, cols) weights as (dirs, cols, rows)."""
    return np.ascontiguousarray(weights.transpose(0, 2, 1))


class _Recurrent(Layer):
    """0 num_output, 1 weight_data_size, 2 direction (0 forward, 1 reverse, 2 both);
    8 int8_scale_term is refused."""

    num_output = Param(0, int, 0, limit=MAX_CHANNELS)
    weight_data_size = Param(1, int, 0, limit=MAX_BLOB_ELEMENTS)
    direction = Param(2, int, 0)
    int8_scale_term = Param(8, int, 0)

    one_blob_only = False
    gpu = True
    cell: ClassVar[CellKind]
    #: how many states the cell carries (RNN and GRU the hidden one, LSTM also the cell)
    states: ClassVar[int] = 1
    weights: CellWeights | None = None

    @property
    def hidden(self) -> int:
        """Units of the cell (LSTM's hidden_size; num_output for the others)."""
        return self.num_output

    @property
    def dirs(self) -> int:
        return 2 if self.direction == 2 else 1

    @property
    def size(self) -> int:
        """Input features per step, from weight_data_size."""
        return self.weight_data_size // (self.dirs * self.cell.gates * self.hidden)

    def validate(self) -> None:
        name = self.type_name
        if self.int8_scale_term:
            raise ValueError(
                f"{name} param 8 int8_scale_term={self.int8_scale_term}: int8 is not supported"
            )
        if self.direction not in (0, 1, 2):
            raise ValueError(
                f"{name} param 2 direction={self.direction}: must be 0 (forward), "
                "1 (reverse) or 2 (bidirectional)"
            )
        if self.num_output <= 0:
            raise ValueError(f"{name} param 0 num_output={self.num_output} must be > 0")
        if self.hidden <= 0:  # LSTM's own param; the others use num_output
            raise ValueError(f"{name} param 3 hidden_size={self.hidden} must be > 0")
        per_input = self.dirs * self.cell.gates * self.hidden
        if self.weight_data_size <= 0 or self.weight_data_size % per_input:
            raise ValueError(
                f"{name} param 1 weight_data_size={self.weight_data_size} must be a positive "
                f"multiple of {per_input} (directions x {self.cell.gates} gates x hidden units)"
            )

    def load_model(self, mb: ModelBin) -> None:
        self.weights = load_weights(
            mb, self.cell, self.dirs, self.size, self.hidden, self.num_output
        )

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        n = 1 + self.states
        return (1, n), (1, n)

    def _state_widths(self) -> list[int]:
        return [self.num_output, self.hidden][: self.states]

    def _count(self) -> int:
        return len(self.tops) if self.tops else 1

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        name = self.type_name
        steps, size = steps_and_size(name, input_shapes[0])
        if size != self.size:
            raise ValueError(
                f"{name}: input width {size} is not the {self.size} inputs of its weights"
            )
        if steps < 1:
            raise ValueError(f"{name} takes at least one time step, got {input_shapes[0]}")
        # the input's part of every gate, step and direction, computed before the steps
        check_elements(self.dirs * steps * self.cell.gates * self.hidden, f"{name}'s input gates")
        shapes: list[Shape] = [(steps, self.num_output * self.dirs)]
        given = input_shapes[1:]
        if given and len(given) != self.states:
            raise ValueError(f"{name} takes {self.states} initial states, got {len(given)}")
        for i, width in enumerate(self._state_widths()):
            wanted = [(self.dirs, width)] + ([(width,)] if self.dirs == 1 else [])
            shape = tuple(given[i]) if given else wanted[0]
            if shape not in wanted:
                forms = " or ".join(str(w) for w in wanted)
                raise ValueError(f"{name}: initial state {i + 1} must be {forms}, got {shape}")
            shapes.append(shape)
        return shapes[: self._count()]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        xs = [np.asarray(x, _F32) for x in inputs]
        shapes = self.output_shapes([x.shape for x in xs])
        assert self.weights is not None, f"{self.type_name}: no weights loaded"
        steps, size = steps_and_size(self.type_name, xs[0].shape)
        x = xs[0].reshape(steps, size)
        widths = self._state_widths()
        if len(xs) > 1:
            start = [s.reshape(self.dirs, -1) for s in xs[1:]]
        else:
            start = [np.zeros((self.dirs, w), _F32) for w in widths]
        cells = start[1] if self.states == 2 else np.zeros((self.dirs, 0), _F32)
        outs, finals = [], [np.zeros((self.dirs, w), _F32) for w in widths]
        for d in range(self.dirs):
            reverse = d == 1 or self.direction == 1
            out, h, c = run_direction(self.cell, self.weights, d, x, reverse, start[0][d], cells[d])
            outs.append(out)
            finals[0][d] = h
            if self.states == 2:
                finals[1][d] = c
        results = [np.concatenate(outs, axis=1), *finals]
        return [r.reshape(s) for r, s in zip(results, shapes, strict=False)]

    # -- GPU -------------------------------------------------------------------------------

    @property
    def _projects(self) -> bool:
        return self.hidden != self.num_output

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        w = self.weights
        assert w is not None, f"{self.type_name}: no weights loaded"
        # transposed: neighbouring invocations (gate rows) read neighbouring weights
        found = {"xc": _columns(w.xc), "bias": w.bias, "hc": _columns(w.hc)}
        return found if w.hr is None else {**found, "hr": _columns(w.hr)}

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        local = local_size_1d(target.info)
        specs = {
            "input": PipelineSpec("recurrent_input", (), local),
            "state": PipelineSpec("recurrent_state", (), local),
            "step": PipelineSpec("recurrent_step", (self.cell.code,), local),
        }
        if self._projects:
            specs["project"] = PipelineSpec("recurrent_project", (), local)
        return specs

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        steps, size = steps_and_size(self.type_name, inputs[0].shape)
        dirs, n, hidden = self.dirs, self.num_output, self.hidden
        rows = self.cell.gates * hidden
        local = local_size_1d(ctx.info)
        # bias + weight_xc x of every gate, step and direction: the part no step waits for
        gate_values = dirs * steps * rows
        x_gates = ctx.scratch(4 * gate_values)
        push = pack_push("5i", steps, size, rows, self.cell.bias_rows * hidden, dirs)
        bindings: list[Buffer | GpuBlob] = [
            inputs[0],
            ctx.weight("xc"),
            ctx.weight("bias"),
            x_gates,
        ]
        ctx.dispatch("input", bindings, push, groups_1d(gate_values, local, ctx.info))
        h = [ctx.scratch(4 * dirs * n), ctx.scratch(4 * dirs * n)]
        cell = ctx.scratch(4 * dirs * hidden) if self.states == 2 else ctx.scratch(4)
        unit = ctx.scratch(4 * dirs * hidden) if self._projects else None  # before projecting

        def start(state: Buffer, given: int, count: int) -> None:
            source = inputs[given] if given < len(inputs) else inputs[0]
            push = pack_push("2i", count, int(given < len(inputs)))
            ctx.dispatch("state", [source, state], push, groups_1d(count, local, ctx.info))

        start(h[0], 1, dirs * n)
        if self.states == 2:
            start(cell, 2, dirs * hidden)
        unused = ctx.scratch(4)
        final_h: Buffer | GpuBlob = outputs[1] if len(outputs) > 1 else unused
        final_c: Buffer | GpuBlob = outputs[2] if len(outputs) > 2 else unused
        bias, hc = ctx.weight("bias"), ctx.weight("hc")
        for t in range(steps):
            ctx.barrier()
            last = t == steps - 1
            push = pack_push(
                "9i", steps, t, n, hidden, dirs, int(self.direction == 1),
                int(unit is not None), int(last and len(outputs) > 1),
                int(last and len(outputs) > 2),
            )  # fmt: skip
            before, after = h[t % 2], h[(t + 1) % 2]
            bindings = [x_gates, outputs[0], bias, hc, before, unit or after, cell]
            groups = groups_1d(dirs * hidden, local, ctx.info)
            ctx.dispatch("step", [*bindings, final_h, final_c], push, groups)
            if unit is not None:
                ctx.barrier()
                bindings = [unit, ctx.weight("hr"), after, outputs[0], final_h]
                ctx.dispatch("project", bindings, push, groups_1d(dirs * n, local, ctx.info))


@register_layer("RNN")
class RNN(_Recurrent):
    """ncnn RNN: ``h = tanh(W_xc x + b + W_hc h)``. 0 num_output, 1 weight_data_size,
    2 direction; inputs x and, optionally, the initial hidden state."""

    cell = RNN_CELL


@register_layer("GRU")
class GRU(_Recurrent):
    """ncnn GRU, gates reset, update and new (whose bias is split around the reset product).
    0 num_output, 1 weight_data_size, 2 direction; inputs x and, optionally, the hidden state."""

    cell = GRU_CELL


@register_layer("LSTM")
class LSTM(_Recurrent):
    """ncnn LSTM, gates I, F, O, G. 0 num_output, 1 weight_data_size, 2 direction, 3 hidden_size
    (default num_output; another value projects each step's hidden units to num_output through
    weight_hr). Inputs x, or x, hidden and cell state; outputs y, or y, hidden and cell state
    (two of either are refused: ncnn ignores a lone hidden input, leaves a second output empty).
    """

    hidden_size = Param(3, int, _Recurrent.num_output, limit=MAX_CHANNELS)

    cell = LSTM_CELL
    states = 2

    @property
    def hidden(self) -> int:
        return self.hidden_size

    def check_blob_counts(self, bottoms: int, tops: int) -> None:
        super().check_blob_counts(bottoms, tops)
        if bottoms == 2 or tops == 2:
            raise ValueError(
                f"LSTM takes 1 or 3 input blobs and gives 1 or 3 output blobs, got {bottoms} "
                f"and {tops}: the hidden state goes with the cell state"
            )
