"""zinf for PyTorch users: zinf's io_uring NVMe engine (zinf.aio), its CPU optimizers
(zinf.optim), and its planner and config validator (zinf.estimate, zinf.check_config),
through libzinf and the zinf program beside it."""
from ._lib import ZinfError
from .plan import check_config, estimate

__all__ = ["ZinfError", "check_config", "estimate"]
