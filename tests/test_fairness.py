"""Fair comparisons: cells one table compares share the budget their spec does not
vary; a planted mismatch is named, in the warning `dpsd sweep` prints and in the table's row."""

import pandas as pd

from dpsd.config import compose
from dpsd.report.tables import paper_table
from dpsd.sweep.fairness import budget_differences

DIGITS = ["dataset=digits", "scale=smoke"]


def test_a_planted_budget_mismatch_is_named_on_both_cells():
    lp1st = compose(["method=lp1st", *DIGITS])
    planted = compose(["method=lp1st", *DIGITS, "method.epochs=10"])  # a new method without its smoke file
    notes = budget_differences({"method"}, [("method=lp1st", lp1st), ("method=mine", planted)])
    assert notes == {"method=lp1st": "method.epochs=1 (others: 10)", "method=mine": "method.epochs=10 (others: 1)"}


def test_equal_budgets_varied_keys_and_keys_one_method_lacks_are_not_flagged():
    lp1st, dpsgd = compose(["method=lp1st", *DIGITS]), compose(["method=dpsgd", *DIGITS])
    dpsd = compose(["method=dpsd", *DIGITS])  # iterations and a batch, no epochs: not compared on epochs
    # DP-SGD's smoke file gives 0.1 epochs (and it has no batch_size: a sample rate)
    assert budget_differences({"method"}, [("a", lp1st), ("b", dpsgd), ("c", dpsd)]) == {
        "a": "method.epochs=1 (others: 0.1)", "b": "method.epochs=0.1 (others: 1)"}
    assert budget_differences({"method", "method.epochs"}, [("a", lp1st), ("b", dpsgd), ("c", dpsd)]) == {}
    other_student = compose(["method=lp1st", *DIGITS, "model/student=lenet5_half"])
    assert "model.student.arch" in budget_differences(set(), [("a", lp1st), ("b", other_student)])["a"]
    assert budget_differences({"model/student"}, [("a", lp1st), ("b", other_student)]) == {}


def test_the_table_marks_a_row_whose_budget_differs():
    groups = pd.DataFrame([{"group": "method=mine", "method": "mine", "dataset": "digits", "epsilon": 1.0,
                            "accuracy": 0.7, "accuracy_std": float("nan"), "eps_claimed": 1.0, "eps_rigorous": 1.0,
                            "neighbouring": "label", "delta": 1e-5, "seeds": 1, "planned_seeds": 1,
                            "code_version": "", "status": "run", "budget": "method.epochs=10 (others: 1)"}])
    empty = pd.DataFrame(columns=["row", "metric", "value_number", "dataset", "epsilon_value", "value",
                                  "source", "note", "method"])
    row = paper_table("study", {}, "smoke", groups, empty).body.iloc[0]["Row"]
    assert row == "mine [UNEQUAL BUDGET: method.epochs=10 (others: 1)]"
