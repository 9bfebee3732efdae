"""Method registry: core methods here, baseline adapters in ``baselines/``, one namespace.

Importing this package registers every method; ``METHODS.get(name)`` finds one by name.
"""

from dpsd.methods.base import METHODS, DataInfo, Method, RunContext, RunResult, register_method
from dpsd.methods import dpsd as _dpsd  # noqa: F401  (registers dpsd, dpsd_t)
import baselines  # noqa: E402,F401  (registers the baseline adapters)

__all__ = ["METHODS", "DataInfo", "Method", "RunContext", "RunResult", "register_method"]
