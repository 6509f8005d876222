"""The secret that makes a cache file this user's: checksums stop accidents, a key stops people.

Every cache file's header carries a MAC (keyed blake2b) over the header, whose hashes cover
the index, every SPIR-V body and the driver blob. A file is used only when its MAC verifies
with this process's key, so someone who can write the file but cannot read the key (another
user, a container sharing the folder) can only make it a miss, never hand the driver a body.

The key, in order of precedence:

* ``PipelineCache(cache_key=...)``, or ``ASYNCVK_CACHE_KEY`` (hex, at least 16 bytes): a
  deployment key, shared by the machines that ship one cache file to each other;
* ``ASYNCVK_CACHE_KEY_FILE``: a file holding such a key (hex or raw bytes);
* the user's own key, ``$XDG_CONFIG_HOME/asyncvk/cache-key`` (default ``~/.config``),
  32 random bytes created on first use with mode 0600 in a 0700 folder.

A key file must belong to this user (or root) and be unreadable by others, as ssh requires of
a private key. When no key can be had (a read-only home, a bad variable), ``problem`` says why:
cache files are then neither read nor written, and each load or save says so in one line.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from dataclasses import dataclass, field

__all__ = ("KEY_ENV", "KEY_FILE_ENV", "UNKEYED", "CacheKey", "local_cache_key")

KEY_ENV = "ASYNCVK_CACHE_KEY"
KEY_FILE_ENV = "ASYNCVK_CACHE_KEY_FILE"
KEY_BYTES = 32
MIN_KEY_BYTES = 16
_MAX_KEY_FILE = 4096
_PERSON_ID = b"avk-cache-keyid"
_PERSON_MAC = b"avk-cache-mac"


@dataclass(frozen=True)
class CacheKey:
    """A cache key: ``secret`` (empty: unkeyed, for values a transport authenticates), where it
    came from, and ``problem`` when there is none to use (then nothing is trusted)."""

    secret: bytes
    source: str
    problem: str | None = None
    key_id: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ident = bytes(16)
        if self.secret:
            ident = hashlib.blake2b(self.secret, digest_size=16, person=_PERSON_ID).digest()
        object.__setattr__(self, "key_id", ident)

    def mac(self, data: bytes | bytearray | memoryview) -> bytes:
        """16 bytes that only a holder of the secret can compute for ``data``."""
        secret = self.secret[:64]  # blake2b's key is at most 64 bytes; longer ones are hashed
        if len(self.secret) > 64:
            secret = hashlib.blake2b(self.secret, person=_PERSON_MAC).digest()
        return hashlib.blake2b(data, digest_size=16, key=secret, person=_PERSON_MAC).digest()

    def describe(self) -> str:
        """The key id and where the key came from, for messages (never the secret)."""
        return f"key {self.key_id.hex()[:12]} ({self.source})"


#: For cache files inside values that something else authenticates (the remote tier's tag).
UNKEYED = CacheKey(b"", "no key")

_lock = threading.Lock()
_cached: dict[tuple[str | None, str | None, str], CacheKey] = {}


def local_cache_key() -> CacheKey:
    """This process's key for cache files and folders (see the module), read once per setting."""
    setting = (os.environ.get(KEY_ENV), os.environ.get(KEY_FILE_ENV), _user_key_path())
    with _lock:
        key = _cached.get(setting)
        if key is None:
            key = _cached[setting] = _find_key(*setting)
    return key


def key_from_setting(value: str | bytes, source: str) -> CacheKey:
    """A deployment key given as hex text or raw bytes; a short or malformed one is a problem."""
    if isinstance(value, bytes):
        try:
            text = value.decode("ascii").strip()
        except UnicodeDecodeError:
            text = ""
        raw = value if not text else None
    else:
        text, raw = value.strip(), None
    if raw is None:
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            return _unusable(source, "is not a hex string")
    if len(raw) < MIN_KEY_BYTES:
        return _unusable(source, f"has {len(raw)} bytes; a cache key needs {MIN_KEY_BYTES}")
    return CacheKey(raw, source)


def _unusable(source: str, why: str) -> CacheKey:
    return CacheKey(b"", source, problem=f"cache key {source} {why}: cache files are not used")


def _user_key_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "asyncvk", "cache-key")


def _find_key(env_key: str | None, env_file: str | None, user_path: str) -> CacheKey:
    if env_key:
        return key_from_setting(env_key, f"${KEY_ENV}")
    if env_file:
        return _read_key_file(env_file, f"${KEY_FILE_ENV} {env_file}")
    try:
        return _read_key_file(user_path, user_path)
    except FileNotFoundError:
        pass
    try:
        _create_user_key(user_path)
    except OSError as exc:
        return CacheKey(
            b"",
            user_path,
            problem=(
                f"no cache key: cannot create {user_path} ({exc.strerror or exc}); set "
                f"{KEY_ENV} to a hex key, or make the folder writable: cache files are not used"
            ),
        )
    return _read_key_file(user_path, user_path)


def _read_key_file(path: str, source: str) -> CacheKey:
    """The key in ``path``, after ssh's checks; FileNotFoundError only for the user's own."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
    except FileNotFoundError:
        if source == path:
            raise
        return _unusable(source, "does not exist")
    except OSError as exc:
        return _unusable(source, f"cannot be read ({exc.strerror or exc})")
    try:
        st = os.fstat(fd)
        why = _key_file_problem(st)
        if why is not None:
            return _unusable(source, why)
        data = os.read(fd, _MAX_KEY_FILE + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_KEY_FILE:
        return _unusable(source, f"is over {_MAX_KEY_FILE} bytes")
    return key_from_setting(data, source)


def _key_file_problem(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid not in (os.geteuid(), 0):
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    if st.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(st.st_mode):04o}: others may read it (chmod 600 it)"
    return None


def _create_user_key(path: str) -> None:
    """32 random bytes at ``path``, whole or not at all: written to a temp file, then linked
    into place, so a concurrent first use reads one complete key (the first link wins)."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = os.path.join(folder, f".cache-key.{os.getpid()}.{os.urandom(8).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, os.urandom(KEY_BYTES).hex().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
    finally:
        os.unlink(tmp)
