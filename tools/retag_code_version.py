"""Give today's method code version to the runs that today's code of their method computed, recorded
under an older hashing rule, before another method's code changed, or before a change shown result-neutral.

    python tools/retag_code_version.py [--results-dir DIR] [--archive results/runs.csv] [--dry-run]
                                       [--result-neutral-since COMMIT [--save-vouched JSON]] [--vouched JSON]
                                       [--methods M ...] [--save-versions JSON | --versions-before JSON]
                                       [--stale-where KEY=VALUE[,KEY!=VALUE ...] ...]

Without a store under ``--results-dir`` (a fresh clone), ``--archive`` and ``--result-neutral-since`` retag the
archive's rows alone.

A run is current when its tag ``method_code_version`` is today's ``dpsd.version.method_code_version`` of its
method. A change to how ``dpsd/version.py`` hashes the sources, or runs recorded before that tag (with the
whole tree's ``code_version`` only), would leave runs STALE whose method's code is today's. For each
(recorded version, method) in the store, this hashes a commit its runs name (tag ``git_commit``) under
today's rule (``dpsd.version.method_code_version_at``); where that equals today's version of the method,
or where the recorded version is today's whole tree's, every such run gets today's method version,
keeping the old one in ``code_version_recorded`` and what vouches for it in ``code_version_vouched_by``.
The ``--archive`` rows of such runs get it too. Runs whose method's code differs stay stale.

``--result-neutral-since COMMIT`` vouches by measurement for a change to shared code that computes the same
numbers (a new switch that is off by default, a refactor, a diagnostic metric added): for every method whose code
version differs between COMMIT and this checkout, it runs the method's default smoke run (``dpsd run method=M
tracking=none``, the embedded dataset, CPU) once with COMMIT's code and once with this checkout's, each in its own
process, and where every metric COMMIT's run records but the wall times is bit-identical in this checkout's (a metric
only this checkout records is listed, not compared), the runs recorded by COMMIT's version of that method get
today's (vouched by ``result-neutral since COMMIT``). A method whose numbers differ, or whose run fails, is
listed and keeps its runs stale. It is evidence for the default path of each method, not a proof for every
config: use it for changes whose new code is off by default, and say so in the commit. With ``--save-vouched JSON``
it writes what it vouched for and stops; ``--vouched JSON`` applies such a file later (runs recorded after the
measurement by COMMIT's code, e.g. a sweep still running from a checkout of it, are retagged without measuring
again).

``--save-versions JSON`` then ``--versions-before JSON`` carry runs across a change of the hashing rule alone
(``dpsd/version.py``, or a part of ``pyproject.toml`` the rule stops hashing): the first writes every method's
version before the change, the second vouches each of those for today's version of its method.

``--stale-where KEY=VALUE[,KEY!=VALUE...]`` (repeatable) names a change's path where its numbers do change: a run
whose logged config meets every condition of one of them keeps its version (stale, listed by a sweep's ``--dry-run``,
re-run with ``--rerun-stale``); the archive's rows that the store does not hold are read back from a spec cell
with their config hash (equal hashes, equal resolved configs), and left stale where no cell has it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import mlflow

from dpsd.methods import METHODS
from dpsd.report.runs import read_archive, write_archive
from dpsd.sweep.store import equivalent_versions, on_path, parse_path, retag_equivalent_runs
from dpsd.version import ROOT, method_code_version, method_code_version_at

WALL_TIMES = ("time_train_s", "time_total_s")
"""Metrics that measure the machine, not the computation: left out of the comparison."""


def smoke_metrics(tree: Path, method: str, workdir: Path, name: str = "run") -> dict[str, float] | str:
    """The metrics of ``method``'s default smoke run with the code in ``tree`` (wall times left out), or the
    last line of its error where it failed; ``workdir`` is its results_dir (its teacher cache, shared by the runs
    given the same one: a teacher's key holds its code's version), ``name`` tells its JSON apart."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{method}-{name}.json"
    done = subprocess.run([sys.executable, "-m", "dpsd.cli", "run", f"method={method}", "tracking=none",
                           f"results_dir={workdir}", "--json", str(out)],
                          cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    if done.returncode:
        return (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {k: v for k, v in json.loads(out.read_text())["metrics"].items() if k not in WALL_TIMES}


def result_neutral(commit: str, methods: list[str]) -> dict[tuple[str, str], str]:
    """``(COMMIT's version, method) -> vouching words`` for each method in ``methods`` whose version changed
    since ``commit`` and whose default smoke run computes the same metrics with both codes."""
    vouched: dict[tuple[str, str], str] = {}
    changed = {m: method_code_version_at(commit, m) for m in methods}
    changed = {m: old for m, old in changed.items() if old is not None and old != method_code_version(m)}
    if not changed:
        print(f"no method's code changed since {commit}")
        return vouched
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base), commit], check=True)
        try:
            shared = Path(scratch) / "results"  # one teacher cache: a teacher both codes key alike is trained once
            for method, old in sorted(changed.items()):
                before = smoke_metrics(base, method, shared, "before")
                after = smoke_metrics(ROOT, method, shared, "after")
                same = recorded_alike(before, after)
                if same:
                    vouched[(old, method)] = f"result-neutral since {commit}: smoke run bit-identical"
                failed = [result for result in (before, after) if isinstance(result, str)]
                verdict = "identical" if same else f"differs: {failed[0] if failed else _differences(before, after)}"
                verdict += f" (new metrics: {', '.join(sorted(set(after) - set(before)))})" if same and after != before else ""
                print(f"  {method} {old} -> {method_code_version(method)}: {verdict}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    return vouched


def recorded_alike(before: dict | str, after: dict | str) -> bool:
    """Whether two smoke runs (metrics, or a failed run's last line) record the same: every metric the older code
    records is bit-identical in the newer one. A metric only the newer code records (a diagnostic added beside the
    computation) changes none of the numbers the archived runs hold, so it is no difference."""
    return isinstance(before, dict) and isinstance(after, dict) and all(
        key in after and after[key] == value for key, value in before.items())


def _differences(before: dict, after: dict) -> str:
    keys = sorted(set(before))
    return ", ".join(f"{k} {before.get(k)} -> {after.get(k)}" for k in keys if before.get(k) != after.get(k))


def rule_change(saved: Path) -> dict[tuple[str, str], str]:
    """``(saved version, method) -> vouching words`` for each method whose version ``--save-versions`` wrote differs
    from today's: the same files hashed under another rule (run it right before changing ``dpsd/version.py``'s rule
    or the hashed part of ``pyproject.toml``, with no other change in between)."""
    before = json.loads(saved.read_text())
    return {(old, method): "the same code under a changed hashing rule" for method, old in before.items()
            if method in METHODS and old != method_code_version(method)}


def spec_configs() -> dict[str, dict[str, str]]:
    """``config hash -> flattened resolved config`` (MLflow's parameter names and string values) of every cell of
    every spec in sweeps/ at each scale: an archive row's config read back from its hash (equal hashes are equal
    resolved configs), for the rows whose run the store does not hold."""
    from omegaconf import OmegaConf

    from dpsd.errors import ConfigError
    from dpsd.sweep.spec import REPO_SWEEPS, SCALES, expand_configs
    from dpsd.tracking import flatten

    configs: dict[str, dict[str, str]] = {}
    for path in sorted(REPO_SWEEPS.glob("*.yaml")):
        for scale in SCALES:
            try:
                pairs = expand_configs(path, scale, [])
            except ConfigError:  # a spec that a scale leaves empty, or one that needs absent data
                continue
            for cell, cfg in pairs:
                if cell.config_hash not in configs:
                    configs[cell.config_hash] = {k: str(v) for k, v in flatten(OmegaConf.to_container(cfg, resolve=True))}
    return configs


def retag_archive_by_config(archive: Path, vouched: dict[tuple[str, str], str], stale_where: list,
                            configs: dict[str, dict[str, str]], skip: set[str]) -> None:
    """The archive's rows whose runs the store does not hold (not in ``skip``), at a vouched version, whose config a
    spec cell still yields (``configs``, by hash) off every ``stale_where`` path get today's version; the others
    keep theirs."""
    rows = read_archive(archive)
    method = rows["code_version"].astype(str).str.extract(r"\+(\w+)\.[0-9a-f]+$")[0]
    hit = [run_id not in skip and (version, name) in vouched and digest in configs
           and not on_path(configs[digest], stale_where)
           for run_id, version, name, digest in zip(rows["run_id"], rows["code_version"], method, rows["config_hash"])]
    left = sum(run_id not in skip and (version, name) in vouched and not h
               for run_id, version, name, h in zip(rows["run_id"], rows["code_version"], method, hit))
    print(f"retagged {sum(hit)} rows of {archive} by their cells' configs; {left} at a vouched version left stale "
          "(on a --stale-where path, or no spec cell has their hash)")
    if any(hit):
        rows.loc[hit, "code_version"] = [method_code_version(name) for name, h in zip(method, hit) if h]
        write_archive(rows, archive)


def retag_archive(archive: Path, vouched: dict[tuple[str, str], str], dry_run: bool) -> None:
    """Without a store (a fresh clone): the archive's rows whose method code version is vouched for get today's
    (the version names its method: ``<package version>+<method>.<hash>``)."""
    rows = read_archive(archive)
    method = rows["code_version"].astype(str).str.extract(r"\+(\w+)\.[0-9a-f]+$")[0]
    hit = [(version, name) in vouched for version, name in zip(rows["code_version"], method)]
    for (version, name), by in sorted(vouched.items()):
        print(f"  {name} {version}: today's {method_code_version(name)} (vouched by {by})")
    print(f"{'would retag' if dry_run else 'retagged'} {sum(hit)} rows of {archive}")
    if not dry_run and any(hit):
        rows.loc[hit, "code_version"] = [method_code_version(name) for name, h in zip(method, hit) if h]
        write_archive(rows, archive)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=Path("results"), help="holds mlflow.db (default results)")
    parser.add_argument("--archive", type=Path, help="a runs archive CSV to update as well")
    parser.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    parser.add_argument("--result-neutral-since", metavar="COMMIT",
                        help="vouch for the methods whose smoke runs at COMMIT and here compute the same metrics")
    parser.add_argument("--save-vouched", type=Path, metavar="JSON",
                        help="with --result-neutral-since: write what it vouched for here and stop")
    parser.add_argument("--vouched", type=Path, metavar="JSON", help="vouch for what --save-vouched wrote")
    parser.add_argument("--stale-where", action="append", default=[], metavar="KEY=VALUE[,KEY!=VALUE...]",
                        help="runs whose logged config meets every condition keep their version (repeatable)")
    parser.add_argument("--methods", nargs="+", help="with --result-neutral-since: only these (default: all)")
    parser.add_argument("--save-versions", type=Path, metavar="JSON",
                        help="write each method's code version here and stop (before a change to the hashing rule)")
    parser.add_argument("--versions-before", type=Path, metavar="JSON",
                        help="vouch for the versions --save-versions wrote: the same code under another hashing rule")
    args = parser.parse_args(argv)
    if args.save_versions:
        args.save_versions.write_text(json.dumps({m: method_code_version(m) for m in METHODS.names()}, indent=1))
        return
    store = args.results_dir / "mlflow.db"
    unknown = sorted(set(args.methods or ()) - set(METHODS.names()))
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS.names())}")
    if args.save_vouched:
        if not args.result_neutral_since:
            parser.error("--save-vouched writes what --result-neutral-since COMMIT measured: give COMMIT")
        measured = result_neutral(args.result_neutral_since, args.methods or METHODS.names())
        args.save_vouched.write_text(json.dumps([[v, m, by] for (v, m), by in sorted(measured.items())], indent=1))
        print(f"wrote {len(measured)} vouched versions to {args.save_vouched}")
        return
    rule_changed = rule_change(args.versions_before) if args.versions_before else {}
    stale_where = [parse_path(group) for group in args.stale_where]
    if args.vouched:
        rule_changed.update({(v, m): by for v, m, by in json.loads(args.vouched.read_text())})
    if not store.exists():
        if args.archive is None or not (args.result_neutral_since or rule_changed):
            parser.error(f"no MLflow store at {store} (expected the results folder of dpsd sweep / dpsd run); "
                         "without one, give --archive and --result-neutral-since or --versions-before to retag "
                         "the archive's rows")
        if stale_where:
            parser.error("--stale-where reads each run's logged config: it needs the MLflow store (--results-dir)")
        vouched = dict(rule_changed)
        if args.result_neutral_since:
            vouched.update(result_neutral(args.result_neutral_since, args.methods or METHODS.names()))
        retag_archive(args.archive, vouched, args.dry_run)
        return
    client = mlflow.MlflowClient(f"sqlite:///{store.resolve()}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    vouched = {**equivalent_versions(client, experiments), **rule_changed}
    if args.result_neutral_since:
        vouched.update(result_neutral(args.result_neutral_since, args.methods or METHODS.names()))
    for (version, method), by in sorted(vouched.items()):
        print(f"  {method} {version}: today's {method_code_version(method)} (vouched by {by})")
    if args.dry_run or not vouched:
        return
    changed = retag_equivalent_runs(client, experiments, vouched, stale_where)
    print(f"retagged {len(changed)} runs in {store}")
    if args.archive is not None:
        rows = read_archive(args.archive)
        hit = rows["run_id"].isin(list(changed))
        rows.loc[hit, "code_version"] = [method_code_version(client.get_run(run_id).data.tags["method"])
                                         for run_id in rows.loc[hit, "run_id"]]
        write_archive(rows, args.archive)
        print(f"retagged {int(hit.sum())} rows of {args.archive}")
        # rows whose runs the store does not hold (a store made afresh, e.g. by `dpsd pages`): by their version,
        # unless a change's path must be told apart (their configs are not in the store)
        if not stale_where:
            retag_archive(args.archive, vouched, dry_run=False)
        else:
            in_store = {run.info.run_id for e in experiments for run in client.search_runs([e], max_results=50000)}
            retag_archive_by_config(args.archive, vouched, stale_where, spec_configs(), in_store)


if __name__ == "__main__":
    main()
