"""Embed asyncvk's inference app in your own aiohttp service, mounted under /model/.

    python examples/embed_server.py MODEL_DIR

Starts the service on a free port, waits for /model/ready, sends MODEL_DIR/input.npy, checks
the answer against MODEL_DIR/output.npy when present, and shuts down cleanly.
"""

import asyncio
import io
import sys
from pathlib import Path

import aiohttp
import numpy as np
from aiohttp import web

from asyncvk.serve import create_app


async def hello(request: web.Request) -> web.Response:
    return web.Response(text="my own service")


async def main(model: Path) -> int:
    app = web.Application()
    app.router.add_get("/", hello)
    app.add_subapp("/model/", create_app(str(model / "model.param"), str(model / "model.bin")))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}/model"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(600):  # the model loads in the background: poll /ready
                async with http.get(f"{base}/ready") as r:
                    if r.status == 200:
                        break
                await asyncio.sleep(0.05)
            body = io.BytesIO()
            np.save(body, np.load(model / "input.npy"))
            async with http.post(
                f"{base}/infer", data=body.getvalue(), headers={"Content-Type": "application/x-npy"}
            ) as reply:
                y = np.load(io.BytesIO(await reply.read()))
        print("output", y.shape)
        if (model / "output.npy").exists():
            ref = np.load(model / "output.npy")
            err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
            print(f"relative L2 against the reference: {err:.2e}")
            return 0 if err < 2e-3 else 1
        return 0
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    default = Path(__file__).resolve().parent.parent / "tests" / "models" / "cunet"
    sys.exit(asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else default)))
