"""Privacy: what methods release (events), the papers' claims, and the rigorous accountants.

Both ledgers are always reported (DESIGN.md, "Privacy: two ledgers, always both"): the paper's own
formula (:mod:`dpsd.privacy.claims`) and a standard accountant over every release
(:mod:`dpsd.privacy.accounting`).
"""

from dpsd.privacy.accounting import Ledger, pld_epsilon, rdp_curve, rdp_epsilon, rigorous_epsilon
from dpsd.privacy.claims import Claim, dpsd_theorem1, dpsd_theorem2, rdp_to_dp_mironov
from dpsd.privacy.events import (
    GaussianRelease,
    LaplaceRelease,
    PrivacyEvent,
    PrivateImagesRelease,
    RandomizedResponseRelease,
    SubsampledGaussianRelease,
    UnprotectedRelease,
)

__all__ = [
    "Claim",
    "GaussianRelease",
    "LaplaceRelease",
    "Ledger",
    "PrivacyEvent",
    "PrivateImagesRelease",
    "RandomizedResponseRelease",
    "SubsampledGaussianRelease",
    "UnprotectedRelease",
    "dpsd_theorem1",
    "dpsd_theorem2",
    "pld_epsilon",
    "rdp_curve",
    "rdp_epsilon",
    "rdp_to_dp_mironov",
    "rigorous_epsilon",
]
