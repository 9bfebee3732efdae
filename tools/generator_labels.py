"""What a run's released generator draws, as its teacher sees it, and what its student gets right per class:
the diagnostic behind a ladder's rung R3 (the data-free loop).

    python tools/generator_labels.py RUN [--images 4096] [overrides]

RUN is an MLflow run id (in the store of ``results_dir``/``tracking``) or a ``dpsd run`` artifact folder
holding ``config.yaml``, ``student.pt`` and ``generator.pt``. Prints the teacher's argmax histogram over
``--images`` generated images and its mean top-1 probability, the same for as many real test images, and
the student's accuracy on the test images of each class. A histogram that misses classes means the queries
never show the student those classes; one whose classes are all there while the student still fails on
real images means the generated images are unlike them. The generator draws from fresh N(0, I) latents: a
method that trains its latents (DPSD's ``method.latents=trainable``) showed its student other ones.
"""

from __future__ import annotations

import argparse

import torch
from torch import Tensor, nn

from dpsd.config import resolve_device
from dpsd.data import load_data
from dpsd.errors import ConfigError
from dpsd.privacy_ops.model_audit import generated_images, released_run
from dpsd.teachers import load_or_train_teacher


def predictions(model: nn.Module, images: Tensor) -> Tensor:
    """``model``'s softmax over ``images``, in chunks of 512."""
    with torch.no_grad():
        return torch.cat([torch.softmax(model(chunk), 1) for chunk in images.split(512)]).cpu()


def histogram_line(name: str, probs: Tensor) -> str:
    counts = torch.bincount(probs.argmax(1), minlength=probs.shape[1]).tolist()
    return f"  {name:34s} {counts}  mean top-1 probability {probs.max(1).values.mean():.3f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="an MLflow run id or a run's artifact folder")
    parser.add_argument("overrides", nargs="*", help="dotted overrides of the run's config (data.root=..., device=cpu)")
    parser.add_argument("--images", type=int, default=4096, help="generated and real images to label (default 4096)")
    args = parser.parse_args(argv)
    if args.images < 1:
        parser.error(f"--images must be >= 1, got {args.images}")
    cfg, released, _ = released_run(args.run, args.overrides)
    if "generator" not in released:
        raise ConfigError(f"generator_labels: run {args.run} has no generator.pt (it released no generator)")
    device = resolve_device(cfg.device)
    data = load_data(cfg)
    teacher, _ = load_or_train_teacher(cfg, data, device)
    teacher.eval()
    student = released["student"]
    generated = generated_images(released["generator"], args.images, int(cfg.seed), device)
    test = [data.test[i] for i in range(min(args.images, len(data.test)))]
    real, labels = torch.stack([x for x, _ in test]).to(device), torch.tensor([int(y) for _, y in test])
    print(f"{cfg.method.name} run {args.run}: the teacher's argmax histogram over the classes (seed {cfg.seed})")
    print(histogram_line(f"{args.images} generated images", predictions(teacher, generated)))
    print(histogram_line(f"{len(test)} real test images", predictions(teacher, real)))
    right = predictions(student, real).argmax(1) == labels
    per_class = [f"{100 * right[labels == k].float().mean():.0f}" for k in range(int(labels.max()) + 1)]
    print(f"  student's accuracy (%) per class on those test images: [{', '.join(per_class)}], "
          f"all {100 * right.float().mean():.2f}")


if __name__ == "__main__":
    main()
