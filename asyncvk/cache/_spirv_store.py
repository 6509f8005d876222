"""The SPIR-V store: bodies compiled once per (shader, option bits, source hash, device macros),
adopted from cache files or the package's SPIR-V folder, and checked against the shader's
declared interface before their first use. It holds no Vulkan object."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from .._errors import CacheMissError, SpirvError
from ..shader._interface import declared_interface, interface_mismatch
from ..shader._options import ShaderOptions
from ..shader._options import macro_hash as hash_of_macros
from ..shader._reflect import ShaderInfo, reflect_spirv
from ..shader._registry import ShaderRegistry
from ._counters import CacheCounters
from ._keys import SpirvKey, split_by_macros
from ._single_flight import Role, SingleFlight

log = logging.getLogger("asyncvk.cache")


class SpirvStore:
    """SPIR-V by key for one device's macros: lookup, shared compiles, adoption and rejection.

    Arguments:
        registry: the shaders a key's name is looked up in.
        macros: the device's macro definitions every compile gets.
        counters: where compiles, hits and rejections are counted.
        use_packaged: take a body from the package's SPIR-V folder before compiling it.
        must_hit: raise CacheMissError instead of compiling.
    """

    def __init__(
        self,
        registry: ShaderRegistry,
        macros: dict[str, str],
        counters: CacheCounters,
        *,
        use_packaged: bool,
        must_hit: bool,
    ) -> None:
        self.registry = registry
        self.use_packaged = use_packaged
        self.must_hit = must_hit
        self._macros = macros
        self._macro_hash = hash_of_macros(macros)
        self._counters = counters
        self._lock = threading.Lock()
        self._spirv: dict[SpirvKey, bytes] = {}
        self._spirv_info: dict[SpirvKey, ShaderInfo] = {}  # only entries checked or compiled
        self._spirv_compiled: dict[SpirvKey, bytes] = {}  # compiled by this process
        self._rejected_spirv: set[tuple[SpirvKey, bytes]] = set()  # never adopted again
        self._flight: SingleFlight[tuple[bytes, ShaderInfo]] = SingleFlight()

    def __len__(self) -> int:
        with self._lock:
            return len(self._spirv)

    def key(self, shader: str, options: ShaderOptions) -> SpirvKey:
        source = self.registry.get(shader)
        return SpirvKey(shader, options.bits, source.source_hash, self._macro_hash)

    def builtin(self, shader: str, options: ShaderOptions) -> tuple[bytes, ShaderInfo]:
        """SPIR-V and reflection for a builtin shader: cache hit, shared compile, or compile."""
        key = self.key(shader, options)

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
            self._counters.add("spirv_hits")
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
            self._counters.add_all({"spirv_compiles": 1, "glsl_seconds": seconds}, changed=True)
            return spirv, info

        with self._lock:
            found = lookup()
        if found is not None:
            return found

        def locked_lookup() -> tuple[bytes, ShaderInfo] | None:
            with self._lock:
                return lookup()

        # Compile inline on this worker thread; concurrent workers wanting the same key wait.
        future, role = self._flight.join_or_start(key, locked_lookup)
        if role is Role.MINE:
            self._flight.produce(key, future, build)
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
                self._counters.add("spirv_rejected")
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
        self._counters.add("spirv_packaged", changed=True)
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

    def drop_adopted(self, key: SpirvKey, spirv: bytes, reason: str) -> bool:
        """Forget ``spirv`` for ``key`` unless this process compiled it (a pipeline failed on
        it); whether it was an adopted body."""
        with self._lock:
            if self._spirv_compiled.get(key) == spirv:
                return False
            self._drop_spirv_locked(key, spirv, reason)
            return True

    def _drop_spirv_locked(self, key: SpirvKey, spirv: bytes, reason: str) -> None:
        """Forget a bad cached body, so nothing uses or saves it again. Holds ``_lock``."""
        self._rejected_spirv.add((key, spirv))
        if self._spirv.get(key) != spirv:
            return  # another thread already dropped it (and maybe compiled a good one)
        del self._spirv[key]
        self._spirv_info.pop(key, None)
        self._counters.add("spirv_rejected", changed=True)  # a save now writes it without it
        log.warning(
            "cached SPIR-V of shader %r [option bits 0x%x] rejected, compiling it from source: %s",
            key.shader,
            key.option_bits,
            reason,
        )

    def check_entries(self) -> list[str]:
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

    def entries(self) -> dict[SpirvKey, bytes]:
        with self._lock:
            return dict(self._spirv)

    def add_entries(self, entries: dict[SpirvKey, bytes]) -> list[str]:
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
                    self._counters.add("spirv_rejected")
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

    def entries_with(self, entries: Mapping[SpirvKey, bytes]) -> dict[SpirvKey, bytes]:
        """This store's entries together with those of ``entries`` that
        :meth:`add_entries` would adopt (this device's macros, builtins as installed, none
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
    def macro_hash(self) -> int:
        """The hash of the device macros this store's keys carry."""
        return self._macro_hash
