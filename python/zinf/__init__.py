"""zinf for PyTorch users: its training engine (zinf.Engine), its io_uring NVMe engine
(zinf.aio), its CPU optimizers (zinf.optim), and its planner and config validator
(zinf.estimate, zinf.check_config), through libzinf and the zinf program beside it."""
from ._lib import ZinfError
from .engine import Engine
from .plan import check_config, estimate

__all__ = ["Engine", "ZinfError", "check_config", "estimate"]
