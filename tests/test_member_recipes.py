"""tools/member_recipes.py: members trained as the ensemble trains them, scored on private records none of them saw."""

import pytest
from conftest import load_tool

from baselines.pate import partition
from dpsd.config import compose


@pytest.mark.parametrize("method", ["pate", "dgd"])
def test_members_are_scored_on_private_records_no_trained_member_holds_and_no_query_asks(method):
    """PATE's pool after its queries; DGD deals every record, so the parts no member here trains on."""
    tool = load_tool("member_recipes")
    cfg = compose([f"method={method}", "dataset=digits", "method.num_teachers=20"])
    parts, pool, queries = tool.dealt(cfg, 1437)
    assert sorted(i for part in parts for i in part) == sorted(set(range(1437)) - set(pool))  # disjoint, all dealt
    assert (len(pool), queries) == ((287, int(cfg.method.queries)) if method == "pate" else (0, 0))
    scored = tool.scored_indices(parts, pool, queries, 4, 50)
    assert len(scored) == 50 == len(set(scored))
    assert not set(scored) & {i for part in parts[:4] for i in part}
    assert not set(scored) & set(pool[:queries])
    if method == "pate":
        assert (parts, pool) == partition(cfg, 1437)  # PATE's own dealing


def test_a_method_dealt_otherwise_is_refused_in_one_line():
    with pytest.raises(SystemExit, match="method=dpsd is not dealt here; accepted: method=pate"):
        load_tool("member_recipes").dealt(compose(["method=dpsd", "dataset=digits"]), 1437)


def test_each_budget_prints_its_members_accuracy_spread_and_seconds(capsys):
    assert load_tool("member_recipes").main(["--steps", "1", "3", "--members", "2", "--scored", "40",
                                             "dataset=digits", "method.num_teachers=20"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("progress")]
    assert lines[0].startswith("digits, small_cnn members: 20 parts of ") and "scored on 40 held-out private" in lines[0]
    assert [line.split(" steps:")[0] for line in lines[1:]] == ["1", "3"]
    assert all(" ± " in line and " s a member, " in line and " h for 20" in line for line in lines[1:])


def test_a_member_is_the_one_the_ensemble_trains_one_by_one(tmp_path):
    """The table prices and scores the members a run trains: the weights a run caches and reads back are the ones
    ``train_member`` gives (its own seed, its own part)."""
    import torch

    from dpsd.data import load_dataset
    from dpsd.ensembles import load_or_train_members, train_member, with_member_steps

    cfg = with_member_steps(compose(["method=pate", "dataset=digits", f"results_dir={tmp_path}",
                                     "model.teacher.ensemble.backend=serial"]), 3)
    data = load_dataset("digits")
    parts, _ = partition(cfg, len(data.train))
    cpu = torch.device("cpu")
    names = ["0/2, probe", "1/2, probe"]
    load_or_train_members(cfg, data, cpu, parts[:2], names)
    ensemble = load_or_train_members(cfg, data, cpu, parts[:2], names)  # read back from the members' cache
    for index, member in enumerate(ensemble):
        probed = train_member(cfg, data, parts[index], index, cpu)
        assert all(torch.equal(a, b) for a, b in zip(member.state_dict().values(), probed.state_dict().values()))
    other = train_member(cfg, data, parts[0], 1, cpu)  # another member's seed
    assert not all(torch.equal(a, b) for a, b in zip(ensemble[0].state_dict().values(), other.state_dict().values()))
