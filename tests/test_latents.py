"""DPSD's latents readings: one batch Z trained (Alg. 1), fresh z untrained (§III-B.1), and fresh z updated with the
generator within the iteration (§III-B.1's vectors "involved for updating", §III-B's last paragraph)."""

import pytest
import torch

from dpsd.config import compose, resolve_paths
from dpsd.experiment import resolve_run
from dpsd.data import load_data
from dpsd.methods.base import RunContext
from dpsd.methods.dpsd import DPSD
from dpsd.models import build_classifier
from dpsd.privacy.accounting import Ledger


def trainer(latents: str, order: str, method: str = "dpsd"):
    cfg = resolve_paths(compose([f"method={method}", "dataset=digits", "privacy=none", "tracking=none", "device=cpu",
                                 "++method.batch_size=16", f"method.latents={latents}",
                                 f"method.update_order={order}"]))
    resolve_run(cfg)
    data = load_data(cfg)
    torch.manual_seed(0)
    teacher = build_classifier("small_cnn", 1, data.image_size, 10).eval()
    torch.manual_seed(1)
    ctx = RunContext(cfg=cfg, data=data, teachers=[teacher], device=torch.device("cpu"),
                     rng=torch.Generator().manual_seed(0), ledger=Ledger())
    return DPSD().make_trainer(ctx)


def test_resample_trained_moves_this_iterations_vectors_before_the_student_sees_them():
    """Generator first: the student learns on samples of the trained inputs, so the vectors drawn this iteration
    are not the ones the generator's step left; under ``resample`` they are left as drawn."""
    for latents, moved in (("resample_trained", True), ("resample", False)):
        run = trainer(latents, "generator_first")
        seen = []
        run.update_student = lambda samples, targets, seen=seen: seen.append(samples) or torch.zeros(())
        run.step()
        rng = torch.Generator().manual_seed(0)
        drawn = torch.randn(run.latents.shape, generator=rng)  # the first draw of the run's rng is the initial batch
        drawn = torch.randn(run.latents.shape, generator=rng)  # the iteration's fresh vectors
        assert torch.equal(run.latents.detach(), drawn) is not moved, latents


def test_resample_trained_starts_each_iterations_vectors_afresh():
    run = trainer("resample_trained", "generator_first")
    run.step()
    after_first = run.latents.detach().clone()
    run.step()
    assert not torch.allclose(run.latents.detach(), after_first)
    assert run.generator_opt.state[run.latents]["step"] == 1  # the moments are those of this iteration's vectors only


@pytest.mark.parametrize("method", ["dpsd", "dpsd_t"])
def test_student_first_resample_trained_is_resample(method):
    """Student first, the updated vectors are never used (the next iteration draws anew): the two readings give the
    same student and generator, to the bit, which the readings search relies on to read its design."""
    runs = [trainer(latents, "student_first", method) for latents in ("resample", "resample_trained")]
    for run in runs:
        for _ in range(3):
            run.step()
    for name in ("student", "generator"):
        for a, b in zip(*(getattr(run, name).state_dict().values() for run in runs)):
            assert torch.equal(a, b), name
