"""Members' predictions kept on disk: read back equal to computing them, computed anew for other members or
images, counted at the privacy boundary as answers, and a DGD run reading them equal to one computing them."""

import torch
from torch import nn

from dpsd.config import compose
from dpsd.ensembles import member_predictions
from dpsd.experiment import run_experiment
from dpsd.privacy.boundary import Accesses, counted_members, watching
from dpsd.vote_cache import cached_predictions

from test_dgd import TINY

CPU = torch.device("cpu")


class Calls(nn.Module):
    """A linear member that counts the inputs it answered."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.layer, self.answered = nn.Linear(12, 4), 0

    def forward(self, x):
        self.answered += len(x)
        return self.layer(x)


def members(n=3):
    return [Calls(seed) for seed in range(n)]


def test_predictions_are_read_back_equal_without_asking_the_members(tmp_path):
    images = torch.randn(50, 12)
    first = members()
    computed = cached_predictions(first, images, CPU, tmp_path)
    assert torch.equal(computed, member_predictions(members(), images, CPU))
    again = members()
    assert torch.equal(cached_predictions(again, images, CPU, tmp_path), computed)
    assert [m.answered for m in again] == [0, 0, 0] and [m.answered for m in first] == [50, 50, 50]


def test_other_members_or_other_images_are_computed_anew(tmp_path):
    images = torch.randn(50, 12)
    cached_predictions(members(), images, CPU, tmp_path)
    changed = members()
    with torch.no_grad():
        changed[1].layer.bias += 1.0
    cached_predictions(changed, images, CPU, tmp_path)
    assert [m.answered for m in changed] == [50, 50, 50]
    fresh = members()
    cached_predictions(fresh, images[:40], CPU, tmp_path)
    assert [m.answered for m in fresh] == [40, 40, 40]
    assert len(list(tmp_path.glob("predictions-*.pt"))) == 3


def test_an_unreadable_file_is_computed_again_with_a_warning(tmp_path, capsys):
    images = torch.randn(20, 12)
    cached_predictions(members(), images, CPU, tmp_path)
    [stored] = tmp_path.glob("predictions-*.pt")
    stored.write_bytes(b"truncated")
    again = members()
    assert torch.equal(cached_predictions(again, images, CPU, tmp_path), member_predictions(members(), images, CPU))
    assert [m.answered for m in again] == [20, 20, 20] and "unreadable" in capsys.readouterr().err


def test_answers_read_back_are_counted_at_the_boundary_as_answers(tmp_path):
    images, parts = torch.randn(30, 12), [[0, 1], [2, 3], [4, 5]]
    counts = []
    for _ in range(2):  # computed, then read back
        with watching(Accesses()) as accesses:
            held = counted_members(members(), parts, ["0/3", "1/3", "2/3"])
            cached_predictions(held, images, CPU, tmp_path)
        counts.append(dict(accesses.member_answers))
    assert counts[0] == counts[1] == {"0/3": 30, "1/3": 30, "2/3": 30}


def test_a_dgd_run_reading_the_evaluation_votes_equals_one_computing_them(tmp_path, run_as_planned):
    cfg = compose(["method=dgd", f"results_dir={tmp_path}", *TINY])
    computed, ledger = run_as_planned(cfg)
    [stored] = (tmp_path / "teachers" / "votes").glob("predictions-*.pt")
    written = stored.stat().st_ino
    read_back = run_experiment(cfg, show_progress=False)
    assert stored.stat().st_ino == written  # read, not written again
    wall = ("time_train_s", "time_total_s")
    assert {k: v for k, v in read_back["metrics"].items() if k not in wall} == \
        {k: v for k, v in computed.items() if k not in wall}
    assert read_back["privacy"]["eps_rigorous"] == ledger["eps_rigorous"]
