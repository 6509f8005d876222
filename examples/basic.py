"""The ncnn-style flow in a dozen lines, with a pipeline cache file that makes the next start
fast. Usage: python examples/basic.py [MODEL_DIR]"""

import asyncio
import os
import sys
from pathlib import Path

import numpy as np

import asyncvk

# the cache file lives in the user's cache folder, never beside the model (a source tree, or a
# read-only image); asyncvk expands "~" and creates nothing but the file and its lock
CACHE = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "asyncvk" / "basic-example.vkcache"


async def main(model: Path) -> None:
    cache = asyncvk.PipelineCache()
    CACHE.expanduser().parent.mkdir(parents=True, exist_ok=True)
    print(cache.load_cache(CACHE))  # a miss the first time, never an error
    async with asyncvk.Net(asyncvk.Option(pipeline_cache=cache)) as net:
        await net.load_param(model / "model.param")
        await net.load_model(model / "model.bin")
        ex = net.create_extractor()
        ex.input("in0", np.load(model / "input.npy"))
        out = await ex.extract("out0")
    print("output", out.shape, "top-5", np.argsort(out.ravel())[::-1][:5])
    print(cache.save_cache(CACHE))
    cache.close()


if __name__ == "__main__":
    default = Path(__file__).resolve().parent.parent / "tests" / "models" / "squeezenet"
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else default))
