"""The cost modules' shared argument checks (dmlimits.core.checks): one copy, one message."""

from __future__ import annotations

import numpy as np
import pytest
from dmlimits.core import checks

SHOWN = [
    (4.0, "4"), (np.float64(-2.0), "-2"), (2.5, "2.5"), (float("nan"), "nan"),
    (-np.inf, "-inf"), (1e15, "1000000000000000"), (-1e20, "-1e+20"), (3e-9, "3e-09"),
]  # fmt: skip


@pytest.mark.parametrize(("x", "text"), SHOWN)
def test_a_number_is_shown_as_the_user_would_write_it(x, text):
    assert checks.shown(x) == text


def test_numbers_returns_a_float_array_of_what_it_was_given():
    arr = checks.numbers("x", [1, 2.5, 0])
    assert arr.dtype == np.float64 and arr.tolist() == [1.0, 2.5, 0.0]
    assert checks.numbers("x", 3).shape == ()
    assert checks.counts("n", [1, 2, 8]).tolist() == [1.0, 2.0, 8.0]


BAD = [
    (lambda: checks.numbers("words", [3, -1, -2]), "words: got -1; expected finite numbers of "
     "at least 0"),
    (lambda: checks.numbers("par", 0, strict=True), "par: got 0; expected finite numbers "
     "greater than 0"),
    (lambda: checks.numbers("t", [1, np.nan]), "t: got nan; expected finite numbers of at least 0"),
    (lambda: checks.numbers("b", 0.5, minimum=1), "b: got 0.5; expected finite numbers of at "
     "least 1"),
    (lambda: checks.counts("n_gpu", [8, 2.5]), "n_gpu: got 2.5; expected whole numbers of at "
     "least 1"),
    (lambda: checks.counts("p", 1, 2), "p: got 1; expected whole numbers of at least 2"),
    (lambda: checks.counts("p", np.inf), "p: got inf; expected whole numbers of at least 1"),
    (lambda: checks.numbers("x", "many"), "x: got 'many'; expected finite numbers of at least 0"),
    (lambda: checks.flag("overlap", 1), "overlap: got 1; expected True or False"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "message"), BAD)
def test_a_bad_argument_is_named_with_its_first_bad_value_and_what_was_expected(call, message):
    with pytest.raises(ValueError) as caught:
        call()
    assert str(caught.value) == message


def test_trusted_arguments_convert_without_checking():
    with checks.trusted_arguments():
        assert checks.numbers("x", [-1, np.nan], strict=True).shape == (2,)
        assert checks.counts("n", 0.5).tolist() == 0.5
        with pytest.raises(ValueError, match="x: got 'many'"):  # not a number at all
            checks.numbers("x", "many")
    with pytest.raises(ValueError, match=r"n: got 0\.5"):
        checks.counts("n", 0.5)


def test_a_flag_takes_python_and_numpy_booleans():
    assert checks.flag("f", True) is True
    assert checks.flag("f", np.bool_(False)) is False
