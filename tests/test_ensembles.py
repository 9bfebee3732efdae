"""Teacher ensembles: the batched (vmap) and the serial backend train the same members, cached alike."""

import pytest
import torch

from dpsd.config import compose, resolve_paths
from dpsd.data import load_dataset
from dpsd.ensembles import (ensemble_votes, load_or_train_members, member_predictions, member_seed, split_front,
                            vote_counts, with_member_steps)
from dpsd.errors import ConfigError
from dpsd.teachers import disjoint_partition, teacher_cache_dir

CPU = torch.device("cpu")
# CUDA where there is one (a GPU machine; CI has none): cuDNN's convolutions under vmap are
# another code path (channels-last weights fail there, not on a CPU)
DEVICES = [CPU] + [pytest.param(torch.device("cuda"), marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                              reason="no CUDA device"))]


def _ensemble_cfg(tmp_path, backend, chunk, member=None):
    """A short member recipe (12 steps of 32) with the ensemble ``backend`` and ``chunk``; ``member``: its model/teacher."""
    member = [] if member is None else [f"model/teacher={member}"]
    return resolve_paths(compose([f"results_dir={tmp_path}", *member, "model.teacher.recipe.steps=12",
                                  "model.teacher.recipe.batch_size=32", f"model.teacher.ensemble.backend={backend}",
                                  f"model.teacher.ensemble.chunk={chunk}"]))


def _members(tmp_path, backend, parts, names, device=CPU, member=None):
    cfg, data = _ensemble_cfg(tmp_path, backend, 2, member), load_dataset("digits")
    return cfg, data, load_or_train_members(cfg, data, device, parts, names)


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_and_serial_backends_give_the_same_members_under_the_same_cache_keys(tmp_path, device):
    data = load_dataset("digits")
    parts, _ = disjoint_partition(len(data.train), 4, 0, seed=0)
    parts[3] = parts[3][:20]  # a part smaller than a batch: its own group, one whole batch per step
    names = [f"{i}/4, test" for i in range(4)]
    images = data.test.tensors[0]
    logits = {}
    # float32 convolutions on a GPU too: cuDNN's default TF32 rounds to 10 mantissa bits, which Adam's
    # sign-like first steps amplify into flipped near-tie argmaxes (95% agreement seen on an H100)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        for backend in ("serial", "vmap"):
            cfg, _, members = _members(tmp_path / backend, backend, parts, names, device)
            with torch.no_grad():
                logits[backend] = torch.stack([member(images.to(device)) for member in members]).cpu()
    files = {backend: sorted(p.name for p in teacher_cache_dir(cfg).parent.parent.joinpath(backend, "teachers").iterdir())
             for backend in ("serial", "vmap")}
    assert files["serial"] == files["vmap"] and len(files["serial"]) == 4
    # float rounding differs (grouped convolutions, the batched BN) and Adam's first steps, about
    # lr * sign(g), amplify it where a gradient is near 0: the logits agree to a few hundredths
    assert (logits["serial"] - logits["vmap"]).abs().max() < 0.1
    assert (logits["serial"].argmax(-1) == logits["vmap"].argmax(-1)).float().mean() > 0.98
    # members differ from each other (own part, own seed), not copies of one
    assert not torch.allclose(logits["serial"][0], logits["serial"][1])


def test_a_cached_member_is_loaded_by_either_backend_without_training(tmp_path):
    data = load_dataset("digits")
    parts, _ = disjoint_partition(len(data.train), 2, 0, seed=0)
    names = ["0/2, test", "1/2, test"]
    _, _, trained = _members(tmp_path, "vmap", parts, names)
    stamps = sorted(p.stat().st_mtime_ns for p in (tmp_path / "teachers").iterdir())
    _, _, loaded = _members(tmp_path, "serial", parts, names)
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "teachers").iterdir()) == stamps
    images = data.test.tensors[0][:64]
    assert torch.equal(member_predictions(trained, images, CPU), member_predictions(loaded, images, CPU))


def test_member_seeds_differ_per_member_and_per_run_seed():
    seeds = {member_seed(s, i) for s in range(3) for i in range(50)}
    assert len(seeds) == 150


def test_vote_counts_count_each_members_argmax():
    predictions = torch.tensor([[0, 1], [0, 2], [1, 2]])  # 3 members x 2 images
    assert vote_counts(predictions, 3).tolist() == [[2, 1, 0], [0, 1, 2]]


def test_member_votes_print_a_progress_line_as_members_finish():
    import io

    from dpsd.progress import ProgressLog

    members = [torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3)).eval() for _ in range(4)]
    stream = io.StringIO()
    votes = member_predictions(members, torch.randn(7, 1, 2, 2), torch.device("cpu"), batch_size=3,
                               log=ProgressLog("member votes", len(members), every=0.5, stream=stream))
    assert votes.shape == (4, 7)
    assert [line.split(",")[0] for line in stream.getvalue().splitlines()] == [
        "member votes: step 2/4 (50%)", "member votes: step 4/4 (100%)"]


def test_two_runs_needing_the_same_members_at_once_train_them_once(tmp_path, monkeypatch):
    """The second run waits on the ensemble's lock and loads the members the first one cached."""
    import threading
    import time

    import dpsd.ensembles as ensembles

    trained = []
    real_train = ensembles.train_classifier

    def slow_train(*args, **kwargs):  # both runs look in the cache before either has written to it
        time.sleep(0.5)
        trained.append(kwargs["desc"])
        return real_train(*args, **kwargs)

    monkeypatch.setattr(ensembles, "train_classifier", slow_train)
    data = load_dataset("digits")
    parts, _ = disjoint_partition(len(data.train), 2, 0, seed=0)
    names = ["0/2, test", "1/2, test"]
    cfg = resolve_paths(compose([f"results_dir={tmp_path}", "model.teacher.recipe.steps=12",
                                 "model.teacher.recipe.batch_size=32", "model.teacher.ensemble.backend=serial"]))
    results = [None, None]

    def run(slot):  # two runs: the config composed before (Hydra's compose is not thread-safe)
        results[slot] = load_or_train_members(cfg, data, CPU, parts, names)

    threads = [threading.Thread(target=run, args=(slot,)) for slot in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(trained) == ["member 0/2, test", "member 1/2, test"]
    images = data.test.tensors[0][:64]
    assert torch.equal(member_predictions(results[0], images, CPU), member_predictions(results[1], images, CPU))


class Stopped(Exception):
    """The stand-in for a run killed while its members train."""


@pytest.mark.parametrize("backend", ["serial", "vmap"])
def test_a_run_stopped_while_its_members_train_keeps_those_trained_and_the_next_trains_only_the_rest(
        tmp_path, monkeypatch, backend):
    """Serial: each member is cached as it finishes; vmap: each chunk (2 members here). The run is stopped as the
    third member (serial) or the second chunk (vmap) starts; the next run trains the others only, into the same
    members an unbroken run trains."""
    import dpsd.ensembles as ensembles

    data = load_dataset("digits")
    parts, _ = disjoint_partition(len(data.train), 4, 0, seed=0)
    names = [f"{i}/4, test" for i in range(4)]
    trainer = "train_classifier" if backend == "serial" else "_train_chunk"
    real, started = getattr(ensembles, trainer), []

    def stopped_at_the_second_chunk_or_third_member(*args, **kwargs):
        started.append(len(args[-1]) if backend == "vmap" else 1)  # the members this call trains
        if len(started) == (3 if backend == "serial" else 2):
            raise Stopped
        return real(*args, **kwargs)

    monkeypatch.setattr(ensembles, trainer, stopped_at_the_second_chunk_or_third_member)
    with pytest.raises(Stopped):
        _members(tmp_path / "stopped", backend, parts, names)
    assert len(list((tmp_path / "stopped" / "teachers").iterdir())) == 2
    monkeypatch.setattr(ensembles, trainer, lambda *args, **kwargs: started.append(
        len(args[-1]) if backend == "vmap" else 1) or real(*args, **kwargs))
    started.clear()
    _, _, resumed = _members(tmp_path / "stopped", backend, parts, names)
    assert sum(started) == 2  # the two members the stopped run had not cached
    _, _, unbroken = _members(tmp_path / "unbroken", backend, parts, names)
    images = data.test.tensors[0][:64]
    assert torch.equal(member_predictions(resumed, images, CPU), member_predictions(unbroken, images, CPU))


def _augmented_members(tmp_path, backend, chunk, parts, augment="affine", member=None):
    cfg = _ensemble_cfg(tmp_path, backend, chunk, member)
    names = [f"{i}/{len(parts)}, test" for i in range(len(parts))]
    return load_or_train_members(with_member_steps(cfg, None, augment), load_dataset("digits"), CPU, parts, names)


def test_member_augmentation_moves_each_members_batches_by_its_own_stream_whatever_the_chunk(tmp_path):
    data = load_dataset("digits")
    parts, _ = disjoint_partition(len(data.train), 4, 0, seed=0)
    images = data.test.tensors[0]
    logits = {}
    for name, chunk, augment in (("two", 2, "affine"), ("four", 4, "affine"), ("plain", 4, "none")):
        members = _augmented_members(tmp_path / name, "vmap", chunk, parts, augment)
        with torch.no_grad():
            logits[name] = torch.stack([member(images) for member in members])
    # a member's moves come from its own seed, not from its place in a chunk: chunks of 2 and 4 train the same members
    assert (logits["two"] - logits["four"]).abs().max() < 0.1
    assert (logits["two"].argmax(-1) == logits["four"].argmax(-1)).float().mean() > 0.98
    # and they are other members than the unmoved ones, cached under other keys
    assert (logits["four"].argmax(-1) != logits["plain"].argmax(-1)).float().mean() > 0.05
    files = {name: {p.name for p in (tmp_path / name / "teachers").iterdir()} for name in ("four", "plain")}
    assert len(files["four"]) == len(files["plain"]) == 4 and not files["four"] & files["plain"]


def test_members_trained_unmoved_keep_their_cache_keys():
    cfg = compose(["model.teacher.recipe.steps=12"])
    assert "augment" not in with_member_steps(cfg, 20).model.teacher.recipe
    assert with_member_steps(cfg, None) is cfg


def test_member_augmentation_on_the_serial_trainer_or_an_unknown_one_is_one_line(tmp_path):
    data = load_dataset("digits")
    parts, _ = disjoint_partition(len(data.train), 2, 0, seed=0)
    with pytest.raises(ConfigError, match="member augmentation needs the batched trainer: set "
                                          "model.teacher.ensemble.backend=vmap"):
        _augmented_members(tmp_path, "serial", 2, parts)
    with pytest.raises(ConfigError, match="member augmentation must be one of none, affine, got 'flip'"):
        _augmented_members(tmp_path, "vmap", 2, parts, "flip")
    with pytest.raises(ConfigError, match="^member augmentation moves a member's images before its fixed front, which "
                                          "is computed once for all members: scattering_mlp takes member augmentation "
                                          "none$"):
        _augmented_members(tmp_path, "vmap", 2, parts, member="scattering_mlp")


def test_members_on_a_fixed_front_train_its_head_alike_on_either_backend_and_cache_the_head_only(tmp_path):
    """The vmap trainer computes the scattering front once, on every member's records, and trains the heads on it;
    the serial one trains each whole member on its images: the same members."""
    data = load_dataset("digits")
    parts, _ = disjoint_partition(len(data.train), 3, 0, seed=0)
    names = [f"{i}/3, test" for i in range(3)]
    images = data.test.tensors[0]
    logits = {}
    for backend in ("serial", "vmap"):
        _, _, members = _members(tmp_path / backend, backend, parts, names, member="scattering_mlp")
        with torch.no_grad():
            logits[backend] = torch.stack([member(images) for member in members])
    assert (logits["serial"] - logits["vmap"]).abs().max() < 0.1
    assert (logits["serial"].argmax(-1) == logits["vmap"].argmax(-1)).float().mean() > 0.98
    assert not torch.allclose(logits["vmap"][0], logits["vmap"][1])
    stored = torch.load(next((tmp_path / "vmap" / "teachers").iterdir()), weights_only=False)["state_dict"]
    assert sorted(stored) == ["head.0.bias", "head.0.weight", "head.2.bias", "head.2.weight"]


def test_ensemble_votes_of_members_on_a_fixed_front_are_their_summed_answers(tmp_path):
    data = load_dataset("digits")
    parts, _ = disjoint_partition(len(data.train), 3, 0, seed=0)
    _, _, members = _members(tmp_path, "vmap", parts, [f"{i}/3, test" for i in range(3)], member="scattering_mlp")
    front, _ = split_front(members[0])
    assert front is not None and all(split_front(m)[0] is front for m in members)  # one front for all
    images = data.test.tensors[0][:50]
    soft, hard = ensemble_votes(members, images, CPU, chunk=2, batch_size=16)
    with torch.no_grad():
        outputs = torch.stack([member(images) for member in members])
    assert torch.allclose(soft, outputs.softmax(dim=2).sum(dim=0), atol=1e-5)
    assert torch.equal(hard, vote_counts(outputs.argmax(dim=2), 10))
