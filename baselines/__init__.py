"""Baseline adapters, registered into the same method registry as the core methods."""
