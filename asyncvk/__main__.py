"""``python -m asyncvk``: the same as the ``asyncvk`` command."""

import sys

from .cli import main

sys.exit(main())
