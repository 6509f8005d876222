"""Option bits and the macros that turn one GLSL source into its fp32/fp16 and device variants.

Everything that can change the SPIR-V of a builtin shader is either an option bit (part of both
the pipeline digest and the SPIR-V key) or a device macro (hashed into the SPIR-V key).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol


class DeviceLimits(Protocol):
    """The device limits a shader may test (``GpuLimits`` has them)."""

    @property
    def max_compute_workgroup_invocations(self) -> int: ...

    @property
    def max_compute_shared_memory_size(self) -> int: ...


class DeviceFacts(Protocol):
    """What shader variants depend on, as plain values (``gpu.GpuInfo`` has them).

    A protocol rather than GpuInfo itself, so this package imports nothing of asyncvk's.
    """

    @property
    def vendor_id(self) -> int: ...

    @property
    def device_type(self) -> int: ...

    @property
    def subgroup_size(self) -> int: ...

    @property
    def support_fp16_storage(self) -> bool: ...

    @property
    def support_fp16_arithmetic(self) -> bool: ...

    @property
    def support_int8_storage(self) -> bool: ...

    @property
    def support_int8_arithmetic(self) -> bool: ...

    @property
    def limits(self) -> DeviceLimits: ...


#: Bump when the prelude below changes in a way that changes generated code.
PRELUDE_VERSION = 1


@dataclass(frozen=True)
class ShaderOptions:
    """The Option fields that change generated code (ncnn's ``opt_bits``)."""

    use_fp16_storage: bool = False
    use_fp16_arithmetic: bool = False
    use_int8_storage: bool = False
    use_int8_arithmetic: bool = False
    use_subgroup_ops: bool = False

    @property
    def bits(self) -> int:
        """The options as ncnn's ``opt_bits``: part of every pipeline's cache key."""
        return (
            self.use_fp16_storage << 0
            | self.use_fp16_arithmetic << 1
            | self.use_int8_storage << 2
            | self.use_int8_arithmetic << 3
            | self.use_subgroup_ops << 4
        )

    @classmethod
    def from_bits(cls, bits: int) -> ShaderOptions:
        """The options whose ``bits`` are ``bits`` (0-31)."""
        if not 0 <= bits < 32:
            raise ValueError(f"option bits {bits} out of range 0-31")
        return cls(
            use_fp16_storage=bool(bits & 1),
            use_fp16_arithmetic=bool(bits & 2),
            use_int8_storage=bool(bits & 4),
            use_int8_arithmetic=bool(bits & 8),
            use_subgroup_ops=bool(bits & 16),
        )

    def supported_on(self, info: DeviceFacts) -> ShaderOptions:
        """These options with whatever the device cannot do switched off."""
        return ShaderOptions(
            use_fp16_storage=self.use_fp16_storage and info.support_fp16_storage,
            use_fp16_arithmetic=self.use_fp16_arithmetic and info.support_fp16_arithmetic,
            use_int8_storage=self.use_int8_storage and info.support_int8_storage,
            use_int8_arithmetic=self.use_int8_arithmetic and info.support_int8_arithmetic,
            use_subgroup_ops=self.use_subgroup_ops,
        )


def option_prelude(options: ShaderOptions) -> str:
    """Extensions and type macros, spliced in after the shader's ``#version`` line.

    ``sfp`` is the storage type, ``afp`` the arithmetic type; ``sfp2afp``/``afp2sfp`` convert.
    """
    lines = []
    fp16 = options.use_fp16_storage
    if fp16:
        lines.append("#extension GL_EXT_shader_16bit_storage : require")
    if options.use_fp16_arithmetic:
        lines.append("#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require")
    if options.use_subgroup_ops:
        lines += [
            "#extension GL_KHR_shader_subgroup_basic : require",
            "#extension GL_KHR_shader_subgroup_arithmetic : require",
        ]
    store = "float16_t" if fp16 else "float"
    store4 = "f16vec4" if fp16 else "vec4"
    arith = "float16_t" if options.use_fp16_arithmetic else "float"
    arith4 = "f16vec4" if options.use_fp16_arithmetic else "vec4"
    if fp16 and not options.use_fp16_arithmetic:
        lines.append("#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require")
    lines += [
        f"#define sfp {store}",
        f"#define sfpvec4 {store4}",
        f"#define afp {arith}",
        f"#define afpvec4 {arith4}",
        f"#define AVK_FP16_STORAGE {int(fp16)}",
        f"#define AVK_FP16_ARITHMETIC {int(options.use_fp16_arithmetic)}",
        f"#define AVK_SUBGROUP_OPS {int(options.use_subgroup_ops)}",
    ]
    return "\n".join(lines) + "\n"


#: The macros :func:`device_macros` defines: a shader that names none is the same on every device.
DEVICE_MACRO_NAMES = (
    "AVK_VENDOR_ID",
    "AVK_DEVICE_TYPE",
    "AVK_SUBGROUP_SIZE",
    "AVK_MAX_WORKGROUP_INVOCATIONS",
    "AVK_MAX_SHARED_MEMORY",
)


def device_macros(info: DeviceFacts) -> dict[str, str]:
    """Device facts a shader may test with ``#if``; all of them go into the SPIR-V key."""
    limits = info.limits
    values = (
        info.vendor_id,
        info.device_type,
        info.subgroup_size,
        limits.max_compute_workgroup_invocations,
        limits.max_compute_shared_memory_size,
    )
    return {name: str(value) for name, value in zip(DEVICE_MACRO_NAMES, values, strict=True)}


#: How every builtin shader compiles, at a load and at install: shaderc's Vulkan 1.1 target
#: (``TargetEnv.VULKAN_1_1``), optimised for performance (``OptimizationLevel.PERFORMANCE``).
#: The packaged files' names hash these with the text, so a change here names no old file.
BUILTIN_TARGET_ENV = (1 << 22) | (1 << 12)
BUILTIN_OPTIMIZATION = 2


def compilable_source(source: str, options: ShaderOptions) -> str:
    """The text a builtin shader compiles from under ``options``: at a load and at install."""
    return splice_prelude(source, option_prelude(options))


def macro_hash(macros: dict[str, str]) -> int:
    """64-bit hash of the device macros and the prelude version."""
    text = f"prelude={PRELUDE_VERSION};" + ";".join(f"{k}={v}" for k, v in sorted(macros.items()))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def splice_prelude(source: str, prelude: str) -> str:
    """Insert ``prelude`` after the ``#version`` line (GLSL requires that line first).

    A ``#line`` directive after the prelude keeps compiler messages on the file's own lines.
    """
    lines = source.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#version"):
            head = "\n".join(lines[: i + 1])
            rest = "\n".join(lines[i + 1 :])
            return f"{head}\n{prelude}#line {i + 2}\n{rest}"
    return prelude + "#line 1\n" + source
