"""Method registry: core methods here, baseline adapters in ``baselines/``, one namespace.

Importing this package registers every method; ``METHODS.get(name)`` finds one by name.
"""

from dpsd.methods.base import METHODS, Method, RunContext, RunResult, register_method
from dpsd.methods import dpsd as _dpsd  # noqa: F401  (registers dpsd, dpsd_t)
from dpsd.methods import dpdfd as _dpdfd  # noqa: F401  (registers dpdfd, dpdfd_direct)
from dpsd.methods import fed_dpsd as _fed_dpsd  # noqa: F401  (registers fed_dpsd)
from dpsd.methods import dp_dfd as _dp_dfd  # noqa: F401  (registers dp_dfd)
from dpsd.methods import dgd as _dgd  # noqa: F401  (registers dgd, dgd_plus)
import baselines  # noqa: E402,F401  (registers the baseline adapters)
from dpsd.methods import dfpate as _dfpate  # noqa: E402,F401  (registers dfpate; it reuses PATE's aggregators)

__all__ = ["METHODS", "Method", "RunContext", "RunResult", "register_method"]
