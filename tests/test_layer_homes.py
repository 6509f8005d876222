"""The table of which module implements each layer type (asyncvk/layers/_homes.py): it matches
what the modules register, and a model imports only the families its types need."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from asyncvk.layers._homes import FAMILIES, HOME

MODELS = Path(__file__).parent / "models"


def _fresh(script: str) -> object:
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_table_is_what_the_modules_register() -> None:
    """A fresh process, so that no other test's imports or test-only types are counted."""
    registered = _fresh(
        "import json, asyncvk.layers._all\n"
        "from asyncvk.layers._registry import _REGISTRY\n"
        "print(json.dumps({n: c.__module__.rsplit('.', 1)[1] for n, c in _REGISTRY.items()}))"
    )
    assert registered == HOME
    assert len(HOME) == sum(len(types) for types in FAMILIES.values()), "a type listed twice"


def test_a_model_imports_only_the_families_it_uses() -> None:
    param = MODELS / "squeezenet" / "model.param"
    used = {line.split()[0] for line in param.read_text().splitlines()[2:] if line.strip()}
    imported = _fresh(
        "import asyncio, json, sys\n"
        "from asyncvk import Net\n"
        "async def main():\n"
        "    async with Net() as net:\n"
        f"        await net.load_param({str(param)!r})\n"
        "asyncio.run(main())\n"
        "print(json.dumps(sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
        "                        if m.startswith('asyncvk.layers.') and '._' not in m)))"
    )
    needed = {HOME[t] for t in used}
    assert needed <= set(imported), (imported, used)
    # Convolution fuses activations, so their module comes with it; no other family may
    assert set(imported) - needed <= {"activation"}, (imported, used)
