"""Ensemble members' predictions on fixed images, kept on disk.

DGD scores its clean-vote ensemble on the same evaluation split in every cell of a seed (the 250
members of ``scale=laptop`` on 2,000 test images: about as long as the rest of the cell on a CPU),
while only the queries change from cell to cell. :func:`cached_predictions` computes each set of
members' predictions on a set of images once and reads them back after that, keyed by the members'
weights and the images themselves, so a changed member or a changed split is computed anew.

A prediction read back is still an answer the member gave about its partition: each is counted at the
privacy boundary as if the member had answered again (:func:`dpsd.privacy.boundary.count_cached_answers`).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch
from torch import Tensor, nn

from dpsd.ensembles import member_predictions
from dpsd.privacy.boundary import count_cached_answers
from dpsd.progress import ProgressLog
from dpsd.teachers import _write_atomically as write_atomically  # the teacher cache's own writer


def predictions_key(members: list[nn.Module], images: Tensor) -> str:
    """A digest of every member's weights and buffers (in their order) and of the images: equal keys,
    equal predictions."""
    digest = hashlib.sha256()
    for member in members:
        for tensor in member.state_dict().values():
            digest.update(f"{tuple(tensor.shape)}{tensor.dtype}".encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    digest.update(f"{tuple(images.shape)}{images.dtype}".encode())
    digest.update(images.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:32]


def cached_predictions(members: list[nn.Module], images: Tensor, device: torch.device, folder: Path,
                       log: ProgressLog | None = None) -> Tensor:
    """``n x len(images)``: :func:`dpsd.ensembles.member_predictions` of ``members`` on ``images``, read
    from ``folder`` where an earlier call stored them, else computed (``log``: a line as members finish)
    and stored there."""
    path = folder / f"predictions-{predictions_key(members, images)}.pt"
    stored = _read(path)
    if stored is not None and tuple(stored.shape) == (len(members), len(images)):
        count_cached_answers(members, len(images))
        return stored.to(device)
    predictions = member_predictions(members, images, device, log=log)
    write_atomically(path, {"predictions": predictions.cpu()})
    return predictions


def _read(path: Path) -> Tensor | None:
    """The stored predictions at ``path``; None where there are none or (with a one-line warning) where
    the file cannot be read, so that the caller computes them again."""
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)["predictions"]
    except Exception as err:  # a truncated or foreign file: compute again
        print(f"dpsd: warning: cached predictions {path} are unreadable ({type(err).__name__}); computing them again",
              file=sys.stderr)
        return None
