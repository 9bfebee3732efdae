"""The fairness check (the sweep's warning and the report's mark) compares only cells a spec declares comparable:
one method with itself (across ε, readings, ...) and the groups of methods under ``feeds.comparable``; different methods' own budgets are not
compared."""

import pytest

from dpsd.config import compose
from dpsd.errors import ConfigError
from dpsd.sweep.fairness import declared_groups, unequal_budgets

DIGITS = ["dataset=digits", "scale=smoke"]


def cells():
    lp1st = compose(["method=lp1st", *DIGITS])  # 1 epoch at smoke scale
    dpsgd = compose(["method=dpsgd", *DIGITS])  # 0.1 epochs: DP-SGD's own budget
    return lp1st, dpsgd


def test_different_methods_own_budgets_are_not_flagged():
    lp1st, dpsgd = cells()
    assert unequal_budgets({"method"}, [("method=lp1st", lp1st), ("method=dpsgd", dpsgd)]) == {}


def test_a_mismatched_budget_inside_a_declared_group_is_still_flagged():
    lp1st, dpsgd = cells()
    notes = unequal_budgets({"method"}, [("method=lp1st", lp1st), ("method=dpsgd", dpsgd)], [("lp1st", "dpsgd")])
    assert notes == {"method=lp1st": "method.epochs=1 (others: 0.1)", "method=dpsgd": "method.epochs=0.1 (others: 1)"}


def test_one_method_across_epsilon_is_compared_with_itself():
    at_1 = compose(["method=lp1st", *DIGITS, "privacy.epsilon=1"])
    at_10 = compose(["method=lp1st", *DIGITS, "privacy.epsilon=10", "method.epochs=10"])  # a planted mismatch
    _, dpsgd = cells()
    notes = unequal_budgets({"method", "privacy.epsilon"},
                            [("eps=1", at_1), ("eps=10", at_10), ("method=dpsgd", dpsgd)])
    assert notes == {"eps=1": "method.epochs=1 (others: 10)", "eps=10": "method.epochs=10 (others: 1)"}
    # the key the spec varies is never a mismatch
    assert unequal_budgets({"method", "privacy.epsilon", "method.epochs"}, [("eps=1", at_1), ("eps=10", at_10)]) == {}


@pytest.mark.parametrize("value", ["dpsd", [["dpsd"]], [["dpsd", 3]], [[]]])
def test_a_malformed_comparable_key_is_one_line_naming_the_form(value):
    with pytest.raises(ConfigError, match=r"feeds.comparable must be a list of groups"):
        declared_groups({"comparable": value}, "study")


def test_without_the_key_no_group_is_declared():
    assert declared_groups({}) == [] and declared_groups({"comparable": [["dpsd", "dpsd_t"]]}) == [("dpsd", "dpsd_t")]
