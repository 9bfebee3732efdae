"""Carry cached teachers across a change to the teacher sources that trains the same weights.

    python tools/rekey_teachers.py --since COMMIT [--results-dir results] [--dry-run] [data.root=DIR]

A cached teacher's key holds ``dpsd.version.teacher_code_version()``, the hash of every module that trains it
(``TEACHER_SOURCES``): a change to any of them (a new architecture or dataset beside the old ones) keys every
cached teacher anew, and the next run retrains it — an hour for the papers' ResNet-34 on two CPU cores.

This vouches by measurement, family by family. A family is what a key names but its seed and member: the
dataset and its options, the architecture, its stem, its input convention and its recipe. For each family whose
cached files were trained by COMMIT's teacher code, it trains that family's network for ``PROBE_STEPS`` steps
from seed 0 with COMMIT's code and with this checkout's, each in its own process (a recipe with a target trains
to it, checked at every step), and compares the weights' sha256 (``dpsd.teachers.weights_digest``). Where they
are equal, each of the family's files is written again under today's key (the same weights, ``code_recorded``
and ``code_vouched_by`` beside them); the old file stays for COMMIT's code. A family whose probe differs or
fails is listed and retrains as before. It is evidence for the training path each family takes, not a proof for
every step count: use it for changes that add code beside the families' or keep their steps (say so in the commit).

``data.root=DIR`` is where the families' dataset files are (as for ``dpsd run``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

from dpsd.teachers import TeacherKey, _write_atomically, read_cached
from dpsd.version import ROOT, teacher_code_version, teacher_code_version_at

PROBE_STEPS = 2
"""Optimiser steps a probe trains: enough to run the loader, the network's forward and backward and the optimiser."""

PROBE = r"""
import json, sys
import torch
from omegaconf import OmegaConf
from dpsd.config import compose
from dpsd.data import load_data, teacher_view
from dpsd.teachers import teacher_network, train_classifier, train_to_target, weights_digest

family, root, steps = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)
cfg = compose([f"dataset={family['dataset']}"] + ([f"data.root={root}"] if root else []))
cfg.dataset.options = json.loads(family["dataset_options"])
cfg.model.teacher.input = {"image_size": json.loads(family["input"])["image_size"], "normalization": "minus_one_one"}
data = load_data(cfg)
shown = {"image_size": data.convention.image_size, "mean": data.convention.space.mean,
         "std": data.convention.space.std}
if json.loads(json.dumps(shown)) != json.loads(family["input"]):
    raise SystemExit(f"input convention {family['input']} is not minus_one_one's {json.dumps(shown)}")
recipe = json.loads(family["recipe"])
teacher = OmegaConf.create({"arch": family["arch"], "pretrained": recipe.pop("pretrained"),
                            "stem": family["stem"] or None})
recipe["steps"] = steps
torch.manual_seed(0)
model = teacher_network(teacher, data)
if recipe.get("target"):  # the targeted path, checked at every step
    recipe["target"] = {**recipe["target"], "every": 1}
    train_to_target(model, data, OmegaConf.create(recipe), torch.device("cpu"), 0, "probe")
else:
    train_classifier(model, teacher_view(data.train), OmegaConf.create(recipe), torch.device("cpu"), 0, "probe")
print(weights_digest(model))
"""

FAMILY_FIELDS = ("dataset", "dataset_options", "arch", "stem", "input", "recipe")


def cached_by(cache: Path, code: str) -> dict[tuple[str, ...], list[tuple[Path, dict]]]:
    """The files of the teacher cache ``cache`` trained by teacher code ``code``, grouped by family."""
    families: dict[tuple[str, ...], list[tuple[Path, dict]]] = defaultdict(list)
    for path in sorted(cache.glob("*.pt")):
        stored = read_cached(path)
        key = (stored or {}).get("key") or {}
        if key.get("code") == code:
            families[tuple(str(key.get(field, "")) for field in FAMILY_FIELDS)].append((path, stored))
    return families


def probe(tree: Path, family: dict[str, str], data_root: str) -> str:
    """The weights digest of ``family``'s network after :data:`PROBE_STEPS` steps with the code in ``tree``, or
    ``failed: <last error line>``."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(family), data_root, str(PROBE_STEPS)],
                          cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True)
    if done.returncode:
        unindented = [line for line in done.stderr.splitlines() if line.strip() and not line[0].isspace()]
        return "failed: " + (unindented or ["no output"])[-1]  # an exception's line, not its indented context
    return done.stdout.strip().splitlines()[-1]


def rekeyed(stored: dict, code: str, words: str) -> tuple[TeacherKey, dict]:
    """The cache record ``stored`` under teacher code ``code``, and its key: the same weights and record."""
    key = TeacherKey(**{**stored["key"], "code": code})
    return key, {**stored, "key": key.__dict__, "code_recorded": stored["key"]["code"], "code_vouched_by": words}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--since", required=True, help="the commit whose teacher code trained the cached files")
    parser.add_argument("--results-dir", default="results", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="probe and list, write nothing")
    parser.add_argument("overrides", nargs="*", help="data.root=DIR")
    args = parser.parse_args(argv)
    data_root = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("data.root=")), "")
    if data_root:
        data_root = str(Path(data_root).resolve())
    old, new = teacher_code_version_at(args.since), teacher_code_version()
    if old is None:
        raise SystemExit(f"rekey_teachers: no commit {args.since!r} in this checkout's history")
    if old == new:
        print(f"the teacher code is the same since {args.since} ({new}): nothing to carry")
        return 0
    families = cached_by(args.results_dir / "teachers", old)
    print(f"{sum(map(len, families.values()))} cached teachers by {old}, {len(families)} families; today {new}")
    carried = 0
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base), args.since], check=True)
        try:
            for fields, files in sorted(families.items()):
                family = dict(zip(FAMILY_FIELDS, fields))
                before, after = probe(base, family, data_root), probe(ROOT, family, data_root)
                same = before == after and not before.startswith("failed")
                recipe = json.loads(family["recipe"])
                name = (f"{family['dataset']} {family['arch']} stem {family['stem'] or '-'} {recipe.get('steps')} steps "
                        f"lr {recipe.get('lr')} ({len(files)} files)")
                print(f"  {name}: {'identical' if same else f'differs: {before} -> {after}'}", flush=True)
                if not same:
                    continue
                if args.dry_run:
                    carried += len(files)
                    continue
                words = f"result-neutral since {args.since}: {PROBE_STEPS}-step probe weights identical"
                for path, stored in files:
                    key, record = rekeyed(stored, new, words)
                    _write_atomically(path.parent / key.filename, record)
                    carried += 1
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    print(f"{'would carry' if args.dry_run else 'carried'} {carried} teachers to {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
