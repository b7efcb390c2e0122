"""A slice's verification in words: the evidence removal, and the recolouring where it ran."""

from __future__ import annotations

from gradpick.show.slice_cards import verification


def _effect(change: float, control: float, ratio: float | None, p: float, tested: int) -> dict:
    return {
        "evidence_change": change,
        "random_change": control,
        "ratio": ratio,
        "p_value": p,
        "tested": tested,
        "verified": False,
    }


def test_the_window_alone_and_then_the_colour_test_are_said() -> None:
    row = {"effect": _effect(0.06, 0.05, 1.25, 0.4, 64), "verified": False}
    assert verification(row) == (
        "Not verified: removing the evidence changed 6% of 64 calls, the same area at random "
        "5% (x1.2, p = 0.4)."
    )
    row["colour_effect"] = _effect(0.3, 0.05, 6.0, 1.4e-4, 60)
    assert verification(row).endswith(
        " Giving 60 correctly called images of its label its colour made 30% of them its "
        "errors' call, other classes 5% (x6.0, p = 0.00014)."
    )
    # A colour test judged on its odds ratio says so, with that figure.
    row["colour_effect"] = {
        **_effect(0.85, 0.11, 7.7, 8e-18, 60),
        "odds_ratio": 45.8,
        "statistic": "odds_ratio",
    }
    assert verification(row).endswith("other classes 11% (odds x45.8, p = 8e-18).")
    row["colour_effect"]["odds_ratio"] = None
    assert verification(row).endswith("(odds x∞, p = 8e-18).")
    row["verified"] = True
    assert verification(row, "**{}**").startswith("**Verified**: removing the evidence")
    assert verification({"effect": None, "verified": False}) == "No errors to test."
