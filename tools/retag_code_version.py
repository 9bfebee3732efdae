"""Give today's code version to the runs that today's code computed, recorded under an older hashing rule.

    python tools/retag_code_version.py [--results-dir DIR] [--archive results/runs.csv] [--dry-run]

A change to how ``dpsd/version.py`` hashes the sources (not to the sources) gives every recorded run
another code version, so the report would mark all of them STALE. For each code version recorded in the
store, this hashes a commit its runs name (tag ``git_commit``) under today's rule
(``dpsd.version.code_version_at``); where that equals today's code version, every run recorded under
that version gets today's, keeping the old one in ``code_version_recorded`` and the vouching commit in
``code_version_vouched_by``. The ``--archive`` rows with such a version get today's too. Runs whose code
differs stay stale.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mlflow

from dpsd.report.runs import read_archive, write_archive
from dpsd.sweep.store import equivalent_versions, retag_equivalent_runs
from dpsd.version import code_version


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
    current = code_version()
    vouched = equivalent_versions(client, experiments, current)
    print(f"today's code version {current}")
    for version, commit in sorted(vouched.items()):
        print(f"  {version}: same code as today (commit {commit})")
    if args.dry_run or not vouched:
        return
    changed = retag_equivalent_runs(client, experiments, current, vouched)
    print(f"retagged {len(changed)} runs in {store}")
    if args.archive is not None:
        rows = read_archive(args.archive)
        hit = rows["code_version"].isin(list(vouched))
        write_archive(rows.assign(code_version=rows["code_version"].where(~hit, current)), args.archive)
        print(f"retagged {int(hit.sum())} rows of {args.archive}")


if __name__ == "__main__":
    main()
