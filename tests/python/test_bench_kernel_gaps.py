"""bench/kernel_gaps.py's case lookup, without a GPU: the suites' cases by name, and W5's MLA case at another
head count, batch or length (the length sweep of session 58's MLA item)."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
sys.path.insert(0, ROOT)

from bench import kernel_gaps as G  # noqa: E402
from bench import suites as S  # noqa: E402


def test_suite_case_by_name():
    case = G.case_by_name("W5 MLA 16/1 b128 4k p64")
    assert (case.suite, case.hq, case.hk, case.batch, case.cached) == ("W5", 16, 1, 128, 4 * S.K)
    assert (case.d, case.dv, case.qv, case.page) == (64, 512, True, 64)


def test_mla_case_at_another_length():
    case = G.case_by_name("W5 MLA 16/1 b128 12k p64")
    assert (case.name, case.hq, case.batch, case.cached) == ("W5 MLA 16/1 b128 12k p64", 16, 128, 12 * S.K)
    assert (case.d, case.dv, case.qv, case.page, case.hk) == (64, 512, True, 64, 1)


def test_unknown_name_is_an_error_naming_it():
    with pytest.raises(SystemExit, match="W9 nothing"):
        G.case_by_name("W9 nothing")
