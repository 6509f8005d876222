"""The ``asyncvk`` command line. Every command takes ``--json``; errors print one line and exit
non-zero (``--debug`` shows the traceback).

Its first lines import only the standard library: a command that uses the GPU starts opening
the Vulkan device on a thread as soon as its arguments are parsed (the driver's 100-200 ms run
in C, with the GIL released), and numpy and the rest of asyncvk are imported beside it.
``run`` and ``bench`` report time from the kernel's start of the process (``clock``), the
clock a user holds.
"""

from ._main import console_main, main
from ._parser import build_parser

__all__ = ["build_parser", "console_main", "main"]
