"""The serving engine behind ``asyncvk serve``: the dynamic batcher, the model repository, and
the Open Inference Protocol over HTTP (and gRPC), as an aiohttp app to run or to mount.

Example::

    from aiohttp import web
    from asyncvk.serve import create_app

    app = web.Application()
    app.add_subapp("/model/", create_app("model.param", "model.bin"))
"""

from ._app import create_app, create_models_app
from ._batcher import BatchSettings
from ._repository import ModelFiles
from ._run import run_server

__all__ = ["BatchSettings", "ModelFiles", "create_app", "create_models_app", "run_server"]
