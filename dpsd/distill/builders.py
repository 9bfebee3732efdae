"""The student, generator and optimisers every distillation method starts from."""

from __future__ import annotations

import torch
from omegaconf import DictConfig
from torch import nn

from dpsd.data import DataInfo
from dpsd.models import build_classifier, generator_from_config, init_generator_, xavier_init_


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """``adam``, or ``sgd`` with momentum 0.9 (a config's ``optimizer`` is typed ``Optimizer``)."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def build_student_and_generator(cfg: DictConfig, info: DataInfo, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """The configured student and generator, Xavier-initialised (DPSD §IV-A) and on ``device``
    (``model/generator=gaussian_noise``: fresh N(mean, std²) images, no parameters)."""
    student = build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
    generator = generator_from_config(cfg.model.generator, info.channels, info.image_size, int(cfg.seed), info.space)
    return xavier_init_(student).to(device), init_generator_(generator, cfg.model.generator).to(device)
