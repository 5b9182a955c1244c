"""trainmedic.numbers.fmt_num: the one way a number is written for people."""

from __future__ import annotations

import math

import pytest

from trainmedic.numbers import fmt_num


@pytest.mark.parametrize(("x", "text"), [
    (None, "n/a"), (True, "True"), (7, "7"), (12345, "12,345"), (math.nan, "NaN"),
    (math.inf, "inf"), (-math.inf, "-inf"), (0.0, "0"), (2.31456, "2.315"),
    (1999.5, "1999.5"), (2000.0, "2000"), (4.145e5, "4.14e+05"), (1.5e-5, "1.500e-5"),
    (-0.5, "-0.5"),
])
def test_fmt_num(x, text) -> None:
    assert fmt_num(x) == text


def test_every_formatter_is_this_one() -> None:
    from trainmedic.diagnose.trace import fmt
    from trainmedic.report.wording import fmt_num as report_fmt

    assert report_fmt is fmt_num
    for x in (None, math.nan, 1.5e-5, 4.145e5, 2.31456):
        assert fmt(x) == fmt_num(x)


def test_fmt_size_uses_the_largest_binary_unit_and_no_more_digits_than_needed() -> None:
    from trainmedic.numbers import fmt_size

    assert fmt_size(64 * 2**20) == "64 MiB"
    assert fmt_size(1.5 * 2**30) == "1.5 GiB"
    assert fmt_size(2**10) == "1 KiB"
    assert fmt_size(512) == "512 B"
