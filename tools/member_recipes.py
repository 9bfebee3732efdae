"""What a teacher-ensemble member costs and learns, per training recipe: a probe for the 250-member budget.

    python tools/member_recipes.py [--parts 250] [--members 4] [--recipe STEPS:BATCH:LR ...] [overrides]

The private split is dealt ``--parts`` ways as PATE's and DGD's members are (``disjoint_partition``, no pool);
the first ``--members`` parts each train a fresh small CNN with ``dpsd.teachers.train_classifier`` (Adam,
one-cycle schedule, the recipe's optimiser steps, batch and peak learning rate), timed apart from the scoring.
Prints, per recipe, the members' mean accuracy on the first 2,000 test images, the seconds of training a
member, and the minutes that makes for all parts. Timing claims belong here (one run, one machine), not in tests.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from omegaconf import OmegaConf
from torch.utils.data import Subset

from dpsd.config import compose, resolve_device, resolve_paths
from dpsd.data import load_data
from dpsd.ensembles import images_and_labels
from dpsd.models import build_classifier
from dpsd.teachers import disjoint_partition, train_classifier

SCORED = 2000  # test images each member is scored on (DGD's laptop ensemble_eval_size)
DEFAULT_RECIPES = ("30:128:0.003", "6:128:0.003", "40:32:0.005", "20:64:0.01")


def recipe_of(text: str) -> dict:
    """``STEPS:BATCH:LR`` as a :func:`train_classifier` recipe."""
    try:
        steps, batch, lr = text.split(":")
        return {"steps": int(steps), "batch_size": int(batch), "lr": float(lr), "weight_decay": 0.0}
    except ValueError:
        raise SystemExit(f"--recipe {text!r}: expected STEPS:BATCH:LR, e.g. 30:128:0.003") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=250, help="ways the private split is dealt (default 250)")
    parser.add_argument("--members", type=int, default=4, help="members trained per recipe (default 4)")
    parser.add_argument("--recipe", action="append", help=f"STEPS:BATCH:LR (repeatable; default {' '.join(DEFAULT_RECIPES)})")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (default dataset=mnist)")
    args = parser.parse_args(argv)
    recipes = [recipe_of(text) for text in (args.recipe or DEFAULT_RECIPES)]
    cfg = resolve_paths(compose(["dataset=mnist", *args.overrides]))
    device = resolve_device(cfg.device)
    data = load_data(cfg)
    parts, _ = disjoint_partition(len(data.train), args.parts, 0, int(cfg.seed))
    images, labels = images_and_labels(data.test, list(range(min(SCORED, len(data.test)))))
    images, labels = images.to(device), labels.to(device)
    print(f"{cfg.dataset.name}: {args.parts} parts of {len(parts[0])} images, {args.members} members a recipe, "
          f"{torch.get_num_threads()} threads, device {device}")
    for recipe in recipes:
        seconds, accuracies = [], []
        for i in range(args.members):
            model = build_classifier(cfg.model.teacher.arch, data.channels, data.image_size, data.num_classes, False)
            start = time.perf_counter()
            train_classifier(model, Subset(data.train, parts[i]), OmegaConf.create(recipe), device, int(cfg.seed) + i,
                             desc="member")
            seconds.append(time.perf_counter() - start)
            with torch.no_grad():
                accuracies.append(float((model(images).argmax(dim=1) == labels).float().mean()))
        per_member = statistics.mean(seconds)
        print(f"{recipe['steps']} steps of {recipe['batch_size']}, lr {recipe['lr']:g}: mean member accuracy "
              f"{100 * statistics.mean(accuracies):.1f}%, {per_member:.2f} s a member, "
              f"{per_member * args.parts / 60:.1f} min for {args.parts}", flush=True)


if __name__ == "__main__":
    main()
