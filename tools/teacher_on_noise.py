"""What the teacher says about data-independent inputs: the diagnostic behind the ladder's rung R2.

    python tools/teacher_on_noise.py dataset=mnist data.root=../shared/data [--images 4096] [overrides]

For each noise family, drawn by the generator R2 runs with (``model/generator=gaussian_noise`` with
``model.generator.mean/std``), prints the teacher's argmax histogram over the classes and its mean
top-1 probability, then the range of the real training images. KD on noise (R2) can only teach the
student what the teacher's answers on that noise carry: a histogram with one class means one-class targets.
"""

from __future__ import annotations

import argparse

import torch

from dpsd.config import compose, resolve_device, resolve_paths
from dpsd.data import load_data
from dpsd.models import build_generator
from dpsd.teachers import load_or_train_teacher

FAMILIES = {  # name: (mean, std) of the gaussian_noise generator
    "N(0, 1) (DAFL's pure noise; R2's default)": (0.0, 1.0),
    "N(-0.5, 0.5²)": (-0.5, 0.5),
    "N(-1, 0.5²) (dark: the background is -1)": (-1.0, 0.5),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--images", type=int, default=4096)
    args = parser.parse_args(argv)
    cfg = resolve_paths(compose(["tracking=none", *args.overrides]))
    device = resolve_device(str(cfg.device))
    data = load_data(cfg)
    teacher, _ = load_or_train_teacher(cfg, data, device)
    teacher.eval()
    channels, size = data.train[0][0].shape[0], data.train[0][0].shape[-1]
    latents = torch.zeros(args.images, 1, device=device)  # gaussian_noise ignores latent values
    print(f"teacher's argmax histogram over {args.images} images per family (seed {cfg.seed})")
    with torch.no_grad():
        for name, (mean, std) in FAMILIES.items():
            noise = build_generator(1, channels, size, name="gaussian_noise", seed=int(cfg.seed), mean=mean, std=std)
            probs = torch.softmax(teacher(noise(latents)), 1).cpu()
            histogram = torch.bincount(probs.argmax(1), minlength=probs.shape[1]).tolist()
            print(f"  {name:45s} {histogram}  mean top-1 probability {probs.max(1).values.mean():.3f}")
    first = data.train[0][0]
    print(f"real training images lie in [{first.min().item():.2f}, {first.max().item():.2f}]")


if __name__ == "__main__":
    main()
