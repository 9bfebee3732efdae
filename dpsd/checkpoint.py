"""Resumable runs: an iterative trainer's state saved every N steps, and a killed run resumed from it.

A run with ``checkpoint.every_steps=N`` (N > 0) writes, after every N-th step, one file
``<checkpoint.dir>/<method>-<config hash>.pt`` holding what the next step depends on: the state of
each object the trainer names in ``checkpointed`` (its networks and optimizers), its query count,
the run's random generators (the method's own, torch's global CPU and CUDA ones), the ledger's totals (its
releases merged by kind, as :meth:`dpsd.methods.base.Method.fit` hands them: a file that does not grow with the
steps), and the wall seconds trained so far. A later run of the same config and code
finds the file and goes on from that step (its ``time_train_s`` counts the seconds before the kill
too), so a run killed at 90% (a lease's window, a lost machine) loses at most N steps; on a
deterministic device (the CPU) the resumed run ends with the weights of one that was never stopped
(``tests/test_checkpoint.py``). A file written by other code is not resumed: the run starts afresh
and says so. The runner deletes the file once the run is recorded.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch


class Resumable(Protocol):
    """What a checkpoint reads and restores: a trainer's named stateful attributes and its query count."""

    checkpointed: tuple[str, ...]
    queries: int


@dataclass(frozen=True)
class Checkpointer:
    """Saves and restores one run's state at ``path`` every ``every`` steps, for the code ``code``."""

    path: Path
    every: int
    code: str

    def due(self, steps_done: int, total: int) -> bool:
        """Whether to save after ``steps_done`` steps: every ``every``-th, never after the last."""
        return steps_done % self.every == 0 and steps_done < total

    def save(self, steps_done: int, trainer: Resumable, ledger_events: list, rng: torch.Generator,
             train_seconds: float) -> None:
        """Write the state after ``steps_done`` steps and ``train_seconds`` of training, atomically (a kill while
        writing keeps the last file). ``ledger_events``: the ledger's totals, as the runner hands them."""
        state = {
            "code": self.code, "steps_done": steps_done, "queries": trainer.queries, "train_seconds": train_seconds,
            "trainer": {name: getattr(trainer, name).state_dict() for name in trainer.checkpointed},
            "rng": rng.get_state(), "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
            "ledger_events": list(ledger_events),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        torch.save(state, partial)
        os.replace(partial, self.path)

    def restore(self, trainer: Resumable, ledger_events: list, rng: torch.Generator) -> tuple[int, float]:
        """Load the saved state into ``trainer``, the ledger's events and ``rng``; returns the steps it had
        done and the wall seconds they took ((0, 0.0): no checkpoint, or one from other code, and the run starts
        afresh)."""
        if not self.path.is_file():
            return 0, 0.0
        state: dict[str, Any] = torch.load(self.path, map_location="cpu", weights_only=False)  # our own file
        if state["code"] != self.code:
            print(f"dpsd: checkpoint {self.path} was written by code {state['code']}, this is {self.code}: "
                  "starting afresh", file=sys.stderr)
            return 0, 0.0
        for name in trainer.checkpointed:
            getattr(trainer, name).load_state_dict(state["trainer"][name])
        trainer.queries = state["queries"]
        rng.set_state(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        ledger_events[:] = state["ledger_events"]
        print(f"dpsd: resumed from {self.path} after step {state['steps_done']}", file=sys.stderr, flush=True)
        return int(state["steps_done"]), float(state["train_seconds"])

    def discard(self) -> None:
        """Delete the checkpoint (the run is recorded)."""
        self.path.unlink(missing_ok=True)
