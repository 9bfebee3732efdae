"""Supervised training on labelled batches, shared by the adapters that train a student on
(privatised) labels."""

from __future__ import annotations

from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from dpsd.data import image_of
from dpsd.distill.builders import make_optimizer
from dpsd.methods.base import RunContext
from dpsd.models import build_classifier, xavier_init_


def train_on_batches(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[tuple[Tensor, Tensor]],
    device: torch.device,
    progress: Callable[[int, dict[str, float]], None],
) -> float:
    """One cross-entropy step per ``(images, labels)`` batch; returns the last batch's loss."""
    model.train()
    loss = torch.zeros(())
    for step, (images, labels) in enumerate(batches):
        loss = F.cross_entropy(model(images.to(device)), torch.as_tensor(labels).to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        progress(step, {"loss": loss.detach()})
    return loss.item()


def train_student(ctx: RunContext, dataset: Dataset) -> tuple[nn.Module, float]:
    """A Xavier-initialised ``model.student.arch`` trained on ``dataset`` with Adam (``method.lr``)
    for ``method.epochs`` passes of ``method.batch_size``; returns it and its last loss."""
    cfg, info, method = ctx.cfg, ctx.info, ctx.cfg.method
    student = xavier_init_(
        build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
    ).to(ctx.device)
    optimizer = make_optimizer("adam", student.parameters(), float(method.lr))
    loader = DataLoader(dataset, batch_size=int(method.batch_size), shuffle=True,
                        generator=torch.Generator().manual_seed(int(cfg.seed)))
    batches = (batch for _ in range(int(method.epochs)) for batch in loader)
    return student, train_on_batches(student, optimizer, batches, ctx.device, ctx.progress)


class RelabelledSplit(Dataset):
    """``source``'s images with ``labels`` (privatised ones) in place of its own."""

    def __init__(self, source: Dataset, labels: Tensor) -> None:
        self.source, self.labels = source, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return image_of(self.source, index), self.labels[index]
