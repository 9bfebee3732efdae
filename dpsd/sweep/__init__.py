"""Sweeps: a spec (``sweeps/<name>.yaml``, data) expanded into cells and run with Ray Tune.

A *cell* is one run: the spec's ``base`` overrides + one ``grid`` combination (or one explicit
``cells`` entry) + ``seed=<s>``, at a scale (``check`` adds the shared and the spec's ``check`` overrides: a
pipeline check; ``smoke`` an on-demand spec's own ``smoke`` overrides: its budget), with the command line's
overrides last (they win). Its identity is :func:`~dpsd.cell_identity.config_hash` of the
resolved config, so a cell that already has a FINISHED MLflow run (tag ``cell_status=done``) is never
run again, whichever spec or sweep produced it: an interrupted sweep, re-run, does only what is left.
The tags every trial run carries (``sweep``, ``cell``, ``config_hash``, ``cell_status``,
``mlflow.parentRunId``) are what ``dpsd report`` reads.

* :mod:`~dpsd.sweep.spec`: reading a spec and expanding it into cells (pure data, no MLflow, no Ray);
* :mod:`~dpsd.sweep.store`: the sweep's state in MLflow (done and data-absent cells, the parent run);
* :mod:`~dpsd.sweep.runner`: ``run_sweep`` with Ray Tune (the ``dpsd sweep`` command), ``run_sweeps``
  for several specs as one Tune experiment (``dpsd reproduce``);
* :mod:`~dpsd.sweep.summary`: what a sweep did, per cell, and its one-line-per-cell text.
"""
