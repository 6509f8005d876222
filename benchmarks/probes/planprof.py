import asyncio, time, numpy as np, cProfile, pstats, io
from asyncvk._runner import RunConfig, open_net
from asyncvk.net._plan import Plan
async def main():
    d="tests/models/rrdb"
    opened = await open_net(RunConfig(f"{d}/model.param", f"{d}/model.bin"))
    net=opened.net; x=np.load(f"{d}/input.npy")
    ex=net.create_extractor(); ex.input("in0", x); await ex.extract("out0")
    key=list(net._plans)[0]
    pr=cProfile.Profile(); pr.enable()
    for _ in range(3): Plan(net, dict(key[1]), key[0]).release()
    pr.disable()
    s=io.StringIO(); pstats.Stats(pr,stream=s).sort_stats("tottime").print_stats(25); print(s.getvalue()[:5000])
asyncio.run(main())
