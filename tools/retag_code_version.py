"""Give today's method code version to the runs that today's code of their method computed, recorded
under an older hashing rule or before another method's code changed.

    python tools/retag_code_version.py [--results-dir DIR] [--archive results/runs.csv] [--dry-run]

A run is current when its tag ``method_code_version`` is today's ``dpsd.version.method_code_version`` of its
method. A change to how ``dpsd/version.py`` hashes the sources, or runs recorded before that tag (with the
whole tree's ``code_version`` only), would leave runs STALE whose method's code is today's. For each
(recorded version, method) in the store, this hashes a commit its runs name (tag ``git_commit``) under
today's rule (``dpsd.version.method_code_version_at``); where that equals today's version of the method,
or where the recorded version is today's whole tree's, every such run gets today's method version,
keeping the old one in ``code_version_recorded`` and what vouches for it in ``code_version_vouched_by``.
The ``--archive`` rows of such runs get it too. Runs whose method's code differs stay stale.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mlflow

from dpsd.report.runs import read_archive, write_archive
from dpsd.sweep.store import equivalent_versions, retag_equivalent_runs
from dpsd.version import method_code_version


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=Path("results"), help="holds mlflow.db (default results)")
    parser.add_argument("--archive", type=Path, help="a runs archive CSV to update as well")
    parser.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    args = parser.parse_args(argv)
    store = args.results_dir / "mlflow.db"
    if not store.exists():
        parser.error(f"no MLflow store at {store} (expected the results folder of dpsd sweep / dpsd run)")
    client = mlflow.MlflowClient(f"sqlite:///{store.resolve()}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    vouched = equivalent_versions(client, experiments)
    for (version, method), by in sorted(vouched.items()):
        print(f"  {method} {version}: today's {method_code_version(method)} (vouched by {by})")
    if args.dry_run or not vouched:
        return
    changed = retag_equivalent_runs(client, experiments, vouched)
    print(f"retagged {len(changed)} runs in {store}")
    if args.archive is not None:
        rows = read_archive(args.archive)
        hit = rows["run_id"].isin(list(changed))
        rows.loc[hit, "code_version"] = [method_code_version(client.get_run(run_id).data.tags["method"])
                                         for run_id in rows.loc[hit, "run_id"]]
        write_archive(rows, args.archive)
        print(f"retagged {int(hit.sum())} rows of {args.archive}")


if __name__ == "__main__":
    main()
