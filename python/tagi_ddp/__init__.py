"""tagi-ddp from Python: build jobs with pytagi's layer names, run them on a
coordinator, and read the trained models into numpy.

    from tagi_ddp import Client, load_model, data
    from tagi_ddp.nn import Sequential, Linear, ReLU

Modules: nn (the model builder), data (DataSpec helpers), client (the Jobs
service: Client, Job, TagiError), model (model files and numpy predictions),
local (run: one job on this host through tagi-run, returning its model).
"""
from . import data, nn  # noqa: F401
from .local import RunError, run  # noqa: F401
from .model import HsmTree, Model, ModelFileError, decode_model, load_model  # noqa: F401

__version__ = "0.1.0"


def __getattr__(name):
    # The client needs grpc; the builder and the model reader do not.
    if name in ("Client", "Job", "TagiError", "client"):
        import importlib
        client = importlib.import_module(".client", __name__)
        return client if name == "client" else getattr(client, name)
    raise AttributeError(f"module 'tagi_ddp' has no attribute {name!r}")
