"""What a teacher-ensemble member learns and costs per optimiser-step budget, scored on held-out private data.

    python tools/member_recipes.py [overrides, e.g. method=pate scale=paper] [--steps 100 200 400 600] [--members 4]

The private split is dealt as the method's ensemble deals it: PATE's ``method.num_teachers`` disjoint parts beside a
held-out pool of ``method.pool_fraction`` (``baselines.pate.partition``), DGD's (``vae_data=synthetic``) over the whole
split with no pool (``dpsd.methods.dgd``: ``disjoint_partition(size, n, 0, seed)``). Each of the first ``--members``
parts trains its member exactly as the ensemble's serial path does (``dpsd.ensembles.train_member``), timed apart from the
scoring. Members are scored on ``--scored`` private records that none of the trained members saw and no query asks
(:func:`scored_indices`: the pool after the queries, then the parts no member here trains on), never the test split,
so the budget chosen from this table has seen no test image. Prints, per step budget, the members' accuracy (mean ±
sample std), the seconds of training a member and the hours that makes for the whole ensemble. Timing claims belong
here (one run, one machine), not in tests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from omegaconf import DictConfig
from torch.utils.data import Subset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from baselines.pate import partition  # noqa: E402
from dpsd.config import compose, resolve_device, resolve_paths  # noqa: E402
from dpsd.data import load_data, teacher_view  # noqa: E402
from dpsd.ensembles import train_member, with_member_steps  # noqa: E402
from dpsd.teachers import disjoint_partition, evaluate_accuracy  # noqa: E402
from dpsd.tracking import hardware_text  # noqa: E402


DEALT = ("pate", "dgd", "dgd_plus")  # the methods whose dealing :func:`dealt` repeats


def dealt(cfg: DictConfig, size: int) -> tuple[list[list[int]], list[int], int]:
    """``(parts, pool, queries)``: the private split of ``size`` records dealt as ``cfg``'s method deals it, and how
    many of the pool's first records its queries take."""
    method = cfg.method
    if method.name == "pate":
        parts, pool = partition(cfg, size)
        return parts, pool, int(method.queries)
    if method.name in DEALT and method.vae_data == "synthetic":
        parts, _ = disjoint_partition(size, int(method.num_teachers), 0, int(cfg.seed))
        return parts, [], 0
    raise SystemExit(f"member_recipes: method={method.name} is not dealt here; accepted: method=pate, method=dgd or "
                     "method=dgd_plus with method.vae_data=synthetic")


def scored_indices(parts: list[list[int]], pool: list[int], queries: int, members: int, scored: int) -> list[int]:
    """At most ``scored`` private records that none of the first ``members`` parts holds and no query asks: the pool
    after the ``queries``, then the records of the parts no member here trains on."""
    return [*pool[queries:], *(i for part in parts[members:] for i in part)][:scored]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[100, 200, 400, 600],
                        help="optimiser-step budgets a member is trained at (default 100 200 400 600)")
    parser.add_argument("--members", type=int, default=4, help="members trained per budget (default 4)")
    parser.add_argument("--scored", type=int, default=2000, help="held-out private images each member is scored on (default 2000)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (default method=pate dataset=mnist)")
    args = parser.parse_args(argv)
    if args.members < 2 or min(args.steps) < 1:
        parser.error("--members must be at least 2 (a spread needs two) and every --steps at least 1")
    cfg = resolve_paths(compose(["method=pate", "dataset=mnist", *args.overrides]))
    device = resolve_device(cfg.device)
    data = load_data(cfg)
    private = teacher_view(data.train)
    parts, pool, queries = dealt(cfg, len(private))
    held_out = scored_indices(parts, pool, queries, args.members, args.scored)
    if len(held_out) < args.scored:
        parser.error(f"--scored {args.scored}: only {len(held_out)} private records are held out from the members")
    scored = Subset(private, held_out)
    recipe = cfg.model.teacher.recipe
    print(f"{cfg.dataset.name}, {cfg.model.teacher.arch} members: {len(parts)} parts of {len(parts[0])} images, "
          f"{args.members} members a budget (batch {recipe.batch_size}, lr {recipe.lr:g}), scored on {len(scored)} "
          f"held-out private images; {hardware_text()}, device {device}", flush=True)
    for steps in args.steps:
        member_cfg = with_member_steps(cfg, steps)
        seconds, accuracies = [], []
        for i in range(args.members):
            start = time.perf_counter()
            model = train_member(member_cfg, data, parts[i], i, device)
            seconds.append(time.perf_counter() - start)
            accuracies.append(100 * evaluate_accuracy(model, scored, device))
        per_member = statistics.mean(seconds)
        print(f"{steps} steps: member accuracy {statistics.mean(accuracies):.2f} ± {statistics.stdev(accuracies):.2f}% "
              f"(each {', '.join(f'{a:.2f}' for a in accuracies)}), {per_member:.2f} s a member, "
              f"{per_member * len(parts) / 3600:.2f} h for {len(parts)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
