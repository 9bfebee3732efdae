"""Run sweep specs' pending cells without Ray, each as a ``dpsd sweep`` trial runs it (for a machine that has no
Ray: the lent GPU, whose image carries none and whose 64 MiB transfer cannot carry it).

    python tools/run_cells.py SPEC[@N] [SPEC[@N] ...] [--processes P] [--threads T] [--stores DIR]
        [--match RE] [--skip RE] [--deadline S] [--no-archive] [--rerun-stale] [--jemalloc] [--dry-run] [scale=S]
        [overrides]

What ``dpsd sweep`` would plan (:func:`dpsd.sweep.runner._plan`: cells done in the store, in ``results/runs.csv``
or in the ``--stores`` of an earlier call at their method's current code version are skipped, so a driver stopped
midway is started again with the same command), then each distinct teacher once,
then every pending cell in ``P`` processes (each cell once its teacher is ready), in priority order: the specs in
the order given, each spec's lowest seed first (so a deadline leaves whole seeds), each through
:func:`dpsd.experiment.run_experiment` with the tags a trial gives it (``sweep``, ``cell``, ``config_hash``,
``cell_status``), so the report finds its run by ``config_hash`` as it finds a trial's; each progress line names its
cell (:func:`dpsd.progress.name_cell`). No parent run is made and no claim is taken: run one driver per store.

``SPEC@N`` runs that spec at seeds 0..N-1 (``dpsd sweep --seeds N``); a bare SPEC at its own ``seeds:``.
``--stores DIR``: process ``k`` records in its own SQLite store ``DIR/w<k>/mlflow.db`` (many writers on one
SQLite file lock each other); ``dpsd sync DIR/w<k> --to <store URI>`` copies each into the main store.
``--deadline S``: no cell starts after S seconds (a lease that ends); cells not started are listed.
``--jemalloc``: the worker processes start under jemalloc (:mod:`dpsd.allocator`: on the CPU an iteration with large
activations runs faster, with the same numbers); each worker says which allocator it runs under.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from dpsd.allocator import in_use, jemalloc_env
from dpsd.errors import ConfigError
from dpsd.progress import name_cell
from dpsd.sweep.runner import _path_overrides, _plan, _teacher_group, cell_pattern, one_line, prepare_teacher
from dpsd.sweep.spec import split_scale
from dpsd.sweep.store import DONE, archived_versions, cell_tags, merged_versions, recorded_versions

_STORE: dict[str, str] = {}  # this worker's tracking overrides (set by _init_worker)


def _end_with_driver(driver: int, every: float = 2.0) -> None:
    """End this worker once its driver (process ``driver``) is gone, however it was stopped (a signal to it alone,
    even SIGKILL, reaches no worker): a stopped driver leaves no cell running beside the one started again. The cell
    in hand is lost; its run was never marked done, so no report reads it and the next call runs it."""
    while os.getppid() == driver:
        time.sleep(every)
    print("run_cells: the driver is gone; this worker stops", flush=True)
    os._exit(1)


def _init_worker(stores: str | None, counter) -> None:
    print(f"run_cells: a worker under {in_use()}", flush=True)
    threading.Thread(target=_end_with_driver, args=(os.getppid(),), daemon=True).start()
    if stores:
        with counter.get_lock():
            counter.value += 1
            index = counter.value
        folder = Path(stores) / f"w{index}"
        folder.mkdir(parents=True, exist_ok=True)
        _STORE.update({"uri": f"sqlite:///{folder.resolve()}/mlflow.db",
                       "artifacts": str((folder / "mlartifacts").resolve())})


def run_one(overrides: list[str], tags: dict[str, str], threads: float | None) -> dict:
    """One cell, as :func:`dpsd.sweep.runner.run_cell` runs it (without Ray, claims or a parent run)."""
    from dpsd.experiment import run_experiment
    from dpsd.sweep.runner import _cell_config

    start = time.time()
    name_cell(tags["cell"])
    try:
        cfg = _cell_config(overrides, threads)
        if _STORE:
            cfg.tracking.uri = _STORE["uri"]
            cfg.tracking.artifact_location = _STORE["artifacts"]
        cfg.tracking.tags = tags
        summary = run_experiment(cfg)
        return {"cell": tags["cell"], "sweep": tags["sweep"], "run_id": summary["run_id"], "seconds": time.time() - start,
                "accuracy": summary["metrics"].get("student_test_accuracy")}
    except Exception as err:
        traceback.print_exc()
        return {"cell": tags["cell"], "sweep": tags["sweep"], "failed": one_line(err), "seconds": time.time() - start}


def stored_versions(stores: str | None) -> dict[str, set[str]]:
    """``config_hash -> method code versions`` of the cells finished in the per-process stores under ``stores``
    (``w<k>/mlflow.db``, an earlier call's), so a second call starts only the cells the first left."""
    from mlflow.tracking import MlflowClient

    found: dict[str, set[str]] = {}
    for database in sorted(Path(stores).glob("w*/mlflow.db")) if stores else []:
        client = MlflowClient(f"sqlite:///{database.resolve()}")
        for experiment in client.search_experiments():
            found = merged_versions(found, recorded_versions(client, experiment.experiment_id))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", help="spec names or files (SPEC@N: at seeds 0..N-1), then overrides (key=value)")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--threads", type=float, default=1, help="intra-op threads per process")
    parser.add_argument("--stores", help="one SQLite store per process under this folder")
    parser.add_argument("--match", help="only cells whose label this regular expression matches")
    parser.add_argument("--skip", help="leave out the cells whose label this regular expression matches")
    parser.add_argument("--deadline", type=float, help="start no cell after this many seconds")
    parser.add_argument("--no-archive", action="store_true", help="count the store's runs only as done")
    parser.add_argument("--dry-run", action="store_true", help="list the cells in the order they would start, run none")
    parser.add_argument("--rerun-stale", action="store_true", help="re-run cells recorded by other code only")
    parser.add_argument("--jemalloc", action="store_true", help="start the workers under jemalloc (dpsd.allocator)")
    args = parser.parse_intermixed_args(argv)
    specs = [s.partition("@") for s in args.specs if "=" not in s]
    scale, overrides = split_scale([s for s in args.specs if "=" in s])
    begun = time.time()
    archived = merged_versions({} if args.no_archive else archived_versions(Path("results/runs.csv")),
                               stored_versions(args.stores))
    plans = [_plan(spec, scale, overrides, None, args.dry_run, args.rerun_stale, {}, cell_pattern(args.match), archived,
                   int(seeds) if seeds else None, cell_pattern(args.skip, "--skip")) for spec, _, seeds in specs]
    jobs, seen, teachers = [], set(), {}
    for order, plan in enumerate(plans):
        for cell, cfg in plan.pending:
            if cell.config_hash in seen:
                continue
            seen.add(cell.config_hash)
            trial = list(cell.overrides) + _path_overrides(cfg)
            teacher = _teacher_group(cfg)
            teachers.setdefault(teacher, trial)
            jobs.append(((order, int(cfg.seed)), trial, cell_tags(cell, DONE), teacher))
    queue = [job[1:] for job in sorted(jobs, key=lambda job: job[0])]  # stable: cell order within a spec's seed
    print(f"run_cells: {len(queue)} cells to run, {len(teachers)} teachers, {args.processes} processes", flush=True)
    if args.dry_run:
        print("\n".join(f"  {tags['sweep']}: {tags['cell']}" for _, tags, _ in queue))
        return 0
    if args.jemalloc:
        os.environ.update(jemalloc_env())  # read by the workers' dynamic loader when the pool spawns them
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    counter = context.Value("i", 0)
    failed = 0
    with ProcessPoolExecutor(args.processes, mp_context=context, initializer=_init_worker,
                             initargs=(args.stores, counter)) as pool:
        # Each distinct teacher first, as a task of its own; a cell starts once its teacher is ready.
        training = {pool.submit(prepare_teacher, trial, args.threads): key for key, trial in teachers.items()}
        ready, pending = set(), set()
        while queue or pending or training:
            while len(pending) + len(training) < args.processes:
                job = next((j for j in queue if j[2] in ready), None)
                if job is None:
                    break
                if args.deadline and time.time() - begun > args.deadline:
                    print(f"run_cells: deadline; not started: {[tags['sweep'] + '/' + tags['cell'] for _, tags, _ in queue]}",
                          flush=True)
                    queue = []
                    break
                queue.remove(job)
                pending.add(pool.submit(run_one, job[0], job[1], args.threads))
            if not pending and not training:
                break
            done, _ = wait(pending | set(training), return_when=FIRST_COMPLETED)
            for future in done:
                if future in training:
                    key = training.pop(future)
                    try:
                        record = future.result()
                    except Exception as err:  # every cell of this teacher fails: none of them is started
                        record = {"failed": one_line(err)}
                    if "test_accuracy" in record:
                        ready.add(key)
                    else:
                        dropped = [j for j in queue if j[2] == key]
                        queue = [j for j in queue if j[2] != key]
                        failed += len(dropped)
                    print(f"run_cells: teacher {key}: {record.get('test_accuracy', record)}", flush=True)
                    continue
                pending.discard(future)
                result = future.result()
                failed += "failed" in result
                print(f"run_cells: {result}", flush=True)
    print(f"run_cells: finished in {time.time() - begun:.0f} s, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ConfigError as err:  # bad input: one line, before any cell runs
        sys.exit(f"run_cells: {err}")
