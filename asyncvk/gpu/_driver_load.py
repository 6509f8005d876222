"""The Vulkan driver's one-time load, started before anything else is imported.

The Vulkan loader's first call loads and initialises the installable client driver: 50-80 ms on
the H100 (driver 580), where ``vkCreateInstance`` after it takes 4 ms (``.variants/steps.py``,
2026-11-23). Made through ctypes, which releases the GIL for the call and costs 3 ms to import
against 15-20 ms for the ``vulkan`` binding, that first call runs while the interpreter imports
``vulkan``, numpy and asyncvk. The instance waits for it (:func:`wait`), so no two loader calls
ever overlap. Any failure is ignored here: the instance's own calls report it.
"""

from __future__ import annotations

import threading

#: what the ``vulkan`` package opens, in its order
_LOADER_NAMES = ("libvulkan.so.1", "vulkan-1.dll", "libvulkan.dylib")

_thread: threading.Thread | None = None
_start_lock = threading.Lock()


def start() -> None:
    """Load the driver on a thread, once per process."""
    global _thread
    with _start_lock:
        if _thread is None:
            _thread = threading.Thread(target=_load_driver, name="asyncvk-driver-load", daemon=True)
            _thread.start()


def wait() -> None:
    """Return once a started load has finished (at once when none was started)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()


def _load_driver() -> None:
    try:
        import ctypes

        for name in _LOADER_NAMES:
            try:
                loader = ctypes.CDLL(name)
            except OSError:
                continue
            count = ctypes.c_uint32(0)
            loader.vkEnumerateInstanceExtensionProperties(None, ctypes.byref(count), None)
            return
    except Exception:  # the instance's own calls meet and report the same failure
        return
