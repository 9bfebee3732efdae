"""Baseline adapters, registered into the same method registry as the core methods.

Each adapter is one module here plus one YAML under ``dpsd/conf/method/`` (see ``README.md``);
importing this package registers them all.
"""

from baselines import dafl, dfkd, dpsgd, kd_data, lp1st, pate, teacher  # noqa: F401  (each registers itself)
from baselines import template  # noqa: F401  (the README's minimal adapter; registered so the contract test runs it)
