"""The share of annotations in which the teacher's answer survives DPSD's top-k rule (Eq. (5)), per phase of a run.

Eq. (5) answers with the teacher's class r only where r lies in the student's top-k I_i; elsewhere the answer is a
class drawn from I_i, the student's own pick whatever the teacher said. :func:`topk_survival` is the share of one
annotated batch where r is in I_i; :func:`survival_metrics` turns a run's shares, one per annotation (a batch the
teacher answered once), into the share over the whole run and over each tenth of its annotations, in order.

A diagnostic for the experimenter, read from the teacher's raw answers as the test accuracy is read from the test
split: it is released to no one and enters no ledger. It draws no random number, so a run computes what it computed
without it.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

SURVIVAL = "topk_survival"
PHASES = 10
"""The run's annotations are cut into this many consecutive phases (tenths) for ``topk_survival_tenth_NN``."""


def topk_survival(teacher_label: Tensor, student_logits: Tensor, k: int) -> Tensor:
    """The share (0-d, in [0, 1]) of a batch whose teacher class ``teacher_label`` lies among the k classes the
    student ranks highest (Eq. (5)'s condition r in I_i; ties broken as the mechanism's ``topk`` breaks them)."""
    top = student_logits.topk(k, dim=1).indices
    return (top == teacher_label.unsqueeze(1)).any(dim=1).to(student_logits.dtype).mean()


def survival_metrics(shares: Sequence[Tensor]) -> dict[str, float]:
    """``topk_survival`` (the mean share over every annotation) and ``topk_survival_tenth_01`` ... ``_10`` (over each
    tenth of them, in order; :data:`PHASES`), from one share per annotation; {} without any (no Eq. (5) was run).
    With fewer annotations than phases, the phases that hold none are left out."""
    if not len(shares):
        return {}
    values = torch.stack(list(shares)).float().cpu()
    metrics = {SURVIVAL: float(values.mean())}
    for index, phase in enumerate(values.tensor_split(PHASES), start=1):
        if len(phase):
            metrics[f"{SURVIVAL}_tenth_{index:02d}"] = float(phase.mean())
    return metrics
