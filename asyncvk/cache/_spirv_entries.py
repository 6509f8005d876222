"""SPIR-V entries: compiled once per (shader, option bits, source hash, device macros), adopted
from cache files or the package's SPIR-V folder, and checked against the shader's declared
interface before their first use."""

from __future__ import annotations

import time
from collections.abc import Mapping

from .._errors import CacheMissError, SpirvError
from ..shader._interface import declared_interface, interface_mismatch
from ..shader._options import ShaderOptions
from ..shader._reflect import ShaderInfo, reflect_spirv
from ._cache_core import CacheCore, log
from ._keys import SpirvKey, split_by_macros
from ._single_flight import Role


class SpirvEntries(CacheCore):
    """The cache's SPIR-V by key: lookup, shared compiles, adoption and rejection."""

    def spirv_key(self, shader: str, options: ShaderOptions) -> SpirvKey:
        source = self.registry.get(shader)
        return SpirvKey(shader, options.bits, source.source_hash, self._macro_hash)

    def _builtin_spirv(self, shader: str, options: ShaderOptions) -> tuple[bytes, ShaderInfo]:
        """SPIR-V and reflection for a builtin shader: cache hit, shared compile, or compile."""
        key = self.spirv_key(shader, options)

        def lookup() -> tuple[bytes, ShaderInfo] | None:
            spirv = self._spirv.get(key)
            if spirv is None:
                return None
            info = self._spirv_info.get(key)
            if info is None:  # adopted from a file: checked once, before its first use
                checked = self._check_adopted(key, spirv)
                if isinstance(checked, str):
                    return None
                info = checked
            self._stats["spirv_hits"] += 1
            return spirv, info

        def build() -> tuple[bytes, ShaderInfo]:
            packaged = self._adopt_packaged(key, options)
            if packaged is not None:
                return packaged
            if self.must_hit:
                raise CacheMissError(
                    f"must-hit: shader {shader!r} (option bits {options.bits}) is not in the "
                    "cache and would be compiled"
                )
            # here: a load that compiles nothing (warm) never imports the compiler's binding
            from ..shader._compiler import compile_builtin

            source = self.registry.get(shader).source
            start = time.perf_counter()
            spirv = compile_builtin(shader, source, options, self._macros)
            seconds = time.perf_counter() - start
            info = reflect_spirv(spirv)
            with self._lock:
                self._spirv[key] = spirv
                self._spirv_info[key] = info
                self._spirv_compiled[key] = spirv
                self.generation += 1
                self._stats["spirv_compiles"] += 1
                self._stats["glsl_seconds"] += seconds
            return spirv, info

        with self._lock:
            found = lookup()
        if found is not None:
            return found

        def locked_lookup() -> tuple[bytes, ShaderInfo] | None:
            with self._lock:
                return lookup()

        # Compile inline on this worker thread; concurrent workers wanting the same key wait.
        future, role = self._spirv_flight.join_or_start(key, locked_lookup)
        if role is Role.MINE:
            self._spirv_flight.produce(key, future, build)
        return future.result()

    def packaged_holds(self, key: SpirvKey) -> bool:
        """Whether the package's folder holds a body for ``key`` that passes the manifest's
        checksum (a file read; reflection and the interface are checked when a build adopts
        it): the remote tier asks the store for none of these."""
        if not self.use_packaged or key.shader not in self.registry:
            return False
        from ..shader._packaged import read_packaged

        source = self.registry.get(key.shader)
        if source.source_hash != key.source_hash:
            return False
        options = ShaderOptions.from_bits(key.option_bits)
        return isinstance(read_packaged(key.shader, options, source.source), bytes)

    def compiled_keys(self) -> set[SpirvKey]:
        """The SPIR-V entries this process compiled from GLSL (new to every store)."""
        with self._lock:
            return set(self._spirv_compiled)

    def _adopt_packaged(
        self, key: SpirvKey, options: ShaderOptions
    ) -> tuple[bytes, ShaderInfo] | None:
        """The package's SPIR-V for ``key``, checked as a cache file's would be; None when there
        is none, or it failed a check or a pipeline's creation here (the caller compiles)."""
        if not self.use_packaged:
            return None
        from ..shader._packaged import read_packaged

        read = read_packaged(key.shader, options, self.registry.get(key.shader).source)
        if read is None:
            return None
        if isinstance(read, bytes):
            with self._lock:
                if (key, read) in self._rejected_spirv:
                    return None
            checked = self._checked(key, read)  # outside the lock: a millisecond of Python
        else:
            checked = read
        spirv = read if isinstance(read, bytes) else b""
        with self._lock:
            if isinstance(checked, str):
                if spirv:  # a body that parsed but failed: never adopted again
                    self._rejected_spirv.add((key, spirv))
                self._stats["spirv_rejected"] += 1
                log.warning(
                    "packaged SPIR-V of shader %r [option bits 0x%x] rejected, compiling it "
                    "from source: %s",
                    key.shader,
                    key.option_bits,
                    checked,
                )
                return None
            if (key, spirv) in self._rejected_spirv:
                return None  # its pipeline failed on another thread meanwhile
            present = self._spirv.get(key)
            if present is not None and key in self._spirv_info:
                return present, self._spirv_info[key]  # adopted from a file meanwhile
            self._spirv[key] = spirv
            self._spirv_info[key] = checked
            self.generation += 1
            self._stats["spirv_packaged"] += 1
        return spirv, checked

    def _checked(self, key: SpirvKey, spirv: bytes) -> ShaderInfo | str:
        """Reflect SPIR-V from outside this process's compiler and check it against its
        shader's declared interface: its ShaderInfo, or what is wrong with it."""
        try:
            info = reflect_spirv(spirv)
        except SpirvError as exc:
            return str(exc)
        mismatch = interface_mismatch(
            info, declared_interface(self.registry.get(key.shader).source)
        )
        if mismatch is not None:
            return f"not the shader its key names: {mismatch}"
        return info

    def _check_adopted(self, key: SpirvKey, spirv: bytes) -> ShaderInfo | str:
        """Check an adopted entry (:meth:`_checked`) and drop it when it fails.

        Returns its ShaderInfo, or why it was dropped (the caller then compiles). Holds _lock.
        """
        checked = self._checked(key, spirv)
        if isinstance(checked, str):
            self._drop_spirv_locked(key, spirv, checked)
        else:
            self._spirv_info[key] = checked
        return checked

    def _drop_spirv_locked(self, key: SpirvKey, spirv: bytes, reason: str) -> None:
        """Forget a bad cached body, so nothing uses or saves it again. Holds ``_lock``."""
        self._rejected_spirv.add((key, spirv))
        if self._spirv.get(key) != spirv:
            return  # another thread already dropped it (and maybe compiled a good one)
        del self._spirv[key]
        self._spirv_info.pop(key, None)
        self._stats["spirv_rejected"] += 1
        self.generation += 1  # a save now writes the file without it
        log.warning(
            "cached SPIR-V of shader %r [option bits 0x%x] rejected, compiling it from source: %s",
            key.shader,
            key.option_bits,
            reason,
        )

    def check_spirv_entries(self) -> list[str]:
        """Check every adopted entry not used yet, as its first use would; drop the bad ones.

        Returns one line per dropped entry (``asyncvk cache verify`` reports them).
        """
        problems = []
        with self._lock:
            for key, spirv in list(self._spirv.items()):
                if key in self._spirv_info or key.shader not in self.registry:
                    continue
                checked = self._check_adopted(key, spirv)
                if isinstance(checked, str):
                    problems.append(
                        f"SPIR-V of {key.shader!r} [option bits 0x{key.option_bits:x}]: {checked}"
                    )
        return problems

    def spirv_entries(self) -> dict[SpirvKey, bytes]:
        with self._lock:
            return dict(self._spirv)

    def add_spirv_entries(self, entries: dict[SpirvKey, bytes]) -> list[str]:
        """Adopt SPIR-V entries loaded from a file or a store: only those for this device's
        macros, and a builtin shader's only as the install compiled it (:meth:`_not_builtin`).
        Returns one line per entry refused for that."""
        mine = split_by_macros(entries, self._macro_hash)[0]
        refused = {
            key: why for key, spirv in mine.items() if (why := self._not_builtin(key, spirv))
        }
        with self._lock:
            for key, spirv in mine.items():
                if key in refused:
                    self._rejected_spirv.add((key, spirv))
                    self._stats["spirv_rejected"] += 1
                elif key not in self._spirv and (key, spirv) not in self._rejected_spirv:
                    # (a body dropped as bad in this process stays dropped: the file holds it)
                    self._spirv[key] = spirv
        lines = [
            f"SPIR-V of {key.shader!r} [option bits 0x{key.option_bits:x}]: {why}"
            for key, why in refused.items()
        ]
        for line in lines:
            log.warning("cached %s; compiling it from source", line)
        return lines

    def spirv_with(self, entries: Mapping[SpirvKey, bytes]) -> dict[SpirvKey, bytes]:
        """This cache's SPIR-V entries together with those of ``entries`` that
        :meth:`add_spirv_entries` would adopt (this device's macros, builtins as installed, none
        dropped as bad here): what a save writes. The live entries are not touched."""
        mine = split_by_macros(entries, self._macro_hash)[0]
        adoptable = {k: v for k, v in mine.items() if not self._not_builtin(k, v)}
        with self._lock:
            union = {k: v for k, v in adoptable.items() if (k, v) not in self._rejected_spirv}
            union.update(self._spirv)
        return union

    def _not_builtin(self, key: SpirvKey, spirv: bytes) -> str | None:
        """Why ``spirv`` is not the install's SPIR-V for ``key``, or None when it is, or when
        the install built none for it. A builtin body is whatever the install compiled, byte
        for byte, so a cache can only ever hand the driver the install's bytes for it; the
        manifest's digest is compared, so no packaged file is read here."""
        if key.shader not in self.registry:
            return None
        source = self.registry.get(key.shader)
        if source.source_hash != key.source_hash:
            return None  # another version of the shader: skipped elsewhere as outdated
        from ..shader._packaged import body_digest, packaged_digest

        try:
            options = ShaderOptions.from_bits(key.option_bits)
        except ValueError:
            return None  # bits no Net asks for: never looked up
        digest = packaged_digest(key.shader, options, source.source)
        if digest is None or body_digest(spirv) == digest:
            return None
        return "not the SPIR-V the install compiled for this builtin shader"

    @property
    def device_macro_hash(self) -> int:
        return self._macro_hash
