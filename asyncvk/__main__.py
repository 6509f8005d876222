"""``python -m asyncvk``: the same as the ``asyncvk`` command."""

from .cli import console_main

console_main()
