"""cffi API-mode build of the in-process shaderc binding (runs at install time).

Debian's ``libshaderc.so.1`` cannot be dlopen'ed (an undefined SPIRV-Tools symbol), so the
extension links Debian's static libraries instead: ``libshaderc-dev glslang-dev spirv-tools``,
with every symbol of theirs hidden (see the link flags below).
``ASYNCVK_SHADERC_PREFIX`` points at another tree holding ``lib/`` and ``include/``.
"""

from __future__ import annotations

import os

from cffi import FFI

CDEF = """
typedef struct shaderc_compiler* shaderc_compiler_t;
typedef struct shaderc_compile_options* shaderc_compile_options_t;
typedef struct shaderc_compilation_result* shaderc_compilation_result_t;

shaderc_compiler_t shaderc_compiler_initialize(void);
void shaderc_compiler_release(shaderc_compiler_t);
shaderc_compile_options_t shaderc_compile_options_initialize(void);
void shaderc_compile_options_release(shaderc_compile_options_t options);
void shaderc_compile_options_add_macro_definition(
    shaderc_compile_options_t options, const char* name, size_t name_length,
    const char* value, size_t value_length);
void shaderc_compile_options_set_optimization_level(shaderc_compile_options_t options, int level);
void shaderc_compile_options_set_target_env(
    shaderc_compile_options_t options, int target, uint32_t version);
void shaderc_compile_options_set_generate_debug_info(shaderc_compile_options_t options);

shaderc_compilation_result_t shaderc_compile_into_spv(
    const shaderc_compiler_t compiler, const char* source_text, size_t source_text_size,
    int shader_kind, const char* input_file_name, const char* entry_point_name,
    const shaderc_compile_options_t additional_options);
void shaderc_result_release(shaderc_compilation_result_t result);
size_t shaderc_result_get_length(const shaderc_compilation_result_t result);
size_t shaderc_result_get_num_warnings(const shaderc_compilation_result_t result);
size_t shaderc_result_get_num_errors(const shaderc_compilation_result_t result);
int shaderc_result_get_compilation_status(const shaderc_compilation_result_t);
const char* shaderc_result_get_bytes(const shaderc_compilation_result_t result);
const char* shaderc_result_get_error_message(const shaderc_compilation_result_t result);
"""

# The C prototypes take enums; in this translation unit they are passed as int, which is
# ABI-compatible, so the wrappers below re-declare them with int parameters.
SOURCE = """
#include <shaderc/shaderc.h>
#define shaderc_compile_options_set_optimization_level(o, l) \\
    shaderc_compile_options_set_optimization_level((o), (shaderc_optimization_level)(l))
#define shaderc_compile_options_set_target_env(o, t, v) \\
    shaderc_compile_options_set_target_env((o), (shaderc_target_env)(t), (v))
#define shaderc_compile_into_spv(c, s, n, k, f, e, o) \\
    shaderc_compile_into_spv((c), (s), (n), (shaderc_shader_kind)(k), (f), (e), (o))
#define shaderc_result_get_compilation_status(r) ((int)shaderc_result_get_compilation_status(r))
"""

STATIC_LIBS = [
    "shaderc_combined",
    "glslang",
    "MachineIndependent",
    "GenericCodeGen",
    "OSDependent",
    "OGLCompiler",
    "SPIRV",
    "glslang-default-resource-limits",
    "SPIRV-Tools-opt",
    "SPIRV-Tools",
]


def _builder() -> FFI:
    prefix = os.environ.get("ASYNCVK_SHADERC_PREFIX")
    include_dirs = [os.path.join(prefix, "include")] if prefix else []
    lib_dirs = [os.path.join(prefix, "lib")] if prefix else ["/usr/lib/x86_64-linux-gnu"]
    link = [f"-L{d}" for d in lib_dirs]
    link += ["-Wl,--start-group", *[f"-l{name}" for name in STATIC_LIBS], "-Wl,--end-group"]
    # Keep the static glslang private: NVIDIA's driver carries its own glslang, and once the
    # driver is loaded an exported symbol of ours can resolve to its copy (a crash inside
    # shaderc_compile_into_spv, seen on an H100 with driver 580). Export only PyInit.
    link += ["-lstdc++", "-lpthread", "-Wl,--exclude-libs,ALL", "-Wl,-Bsymbolic"]
    ffi = FFI()
    ffi.cdef(CDEF)
    ffi.set_source(
        "asyncvk.shader._shaderc_cffi",
        SOURCE,
        include_dirs=include_dirs,
        extra_link_args=link,
    )
    return ffi


ffibuilder = _builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
