"""The one module of argument checks: values refused with their name, before any work."""

import math

import numpy as np
import pytest

from lmpipe.arguments import check_bool, check_choice, check_inside, check_number, check_seed


@pytest.mark.parametrize(
    "value, bounds, message",
    [
        (math.nan, {}, "`x` must be a finite number, got x=nan."),
        (math.inf, {"minimum": 0}, "`x` must be a finite number >= 0, got x=inf."),
        ("0.1", {}, "`x` must be a finite number, got x='0.1'."),
        (True, {"integer": True}, "`x` must be an integer, got x=True."),
        (0, {"minimum": 1, "integer": True}, "`x` must be a positive integer, got x=0."),
        (0.0, {"above": 0}, "`x` must be a positive finite number, got x=0.0."),
        (1.0, {"minimum": 0, "below": 1}, "`x` must be a finite number >= 0 and < 1, got x=1.0."),
        (None, {"minimum": 1}, "`x` must be a finite number >= 1, got x=None."),
    ],
)
def test_check_number_names_the_value_and_what_it_must_be(value, bounds, message):
    with pytest.raises(ValueError) as raised:
        check_number("x", value, **bounds)
    assert str(raised.value) == message


def test_check_number_accepts_numpy_and_huge_integers_and_none_when_allowed():
    assert check_number("x", np.int64(3), minimum=1, integer=True) == 3
    assert check_number("x", 10**400, minimum=1, integer=True) == 10**400
    assert check_number("x", None, none=True) is None


def test_check_choice_bool_and_seed():
    assert check_choice("objective", "nsp", ("nsp", "sop")) == "nsp"
    with pytest.raises(
        ValueError, match=r"`objective` must be one of 'nsp', 'sop', got objective='x'"
    ):
        check_choice("objective", "x", ("nsp", "sop"))
    with pytest.raises(ValueError, match=r"one of 1, 2, got n=True"):
        check_choice("n", True, (1, 2))  # True == 1, but a bool is not the int it equals
    assert check_bool("shuffle", False) is False
    with pytest.raises(ValueError, match=r"`shuffle` must be True or False, got shuffle=1"):
        check_bool("shuffle", 1)
    assert check_seed(-5) == -5
    with pytest.raises(ValueError, match=r"`seed` must be an integer, got seed=1.5"):
        check_seed(1.5)


def test_check_inside_refuses_names_that_leave_the_folder(tmp_path):
    folder = tmp_path / "saved"
    (folder / "sub").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("key")
    (folder / "link.txt").symlink_to(tmp_path / "secret.txt")
    (folder / "sub" / "inside.txt").write_text("ok")
    assert check_inside(folder, "sub/inside.txt", "conf.json", "file") == str(
        folder / "sub" / "inside.txt"
    )
    assert check_inside(folder, "sub/../sub/inside.txt", "conf.json", "file").endswith("inside.txt")
    for name in ("../secret.txt", str(tmp_path / "secret.txt"), "link.txt", "sub/../../x"):
        with pytest.raises(ValueError) as raised:
            check_inside(folder, name, "conf.json", "file")
        assert str(raised.value) == (
            f"conf.json: `file` names {name!r}, which is outside {str(folder)!r}; a saved "
            "folder may only name files inside it."
        )
    with pytest.raises(ValueError, match="`file` must be a file name, got 3"):
        check_inside(folder, 3, "conf.json", "file")
