"""dpsd: differentially private data-free distillation, benchmarked and reproduced."""

__version__ = "0.1.0"
