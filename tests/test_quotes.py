"""Every number the book quotes from a write-up exists in data/reported/ (where the quotes live).

A paragraph that names a write-up (``000_5388518cb9c15bca.txt``) and quotes a time from it must
quote one of that write-up's reported numbers, rounded as written: a typo, or a number from the
wrong row, fails here.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pandas as pd
import pytest

from kernelbook import paths

SEED = re.compile(r"\d{3}_[0-9a-f]{16}\.txt")
# A quoted time: a decimal number followed by ms or s (e.g. "33.53 → 49.44 ms" quotes both).
TIMES = re.compile(r"(?<![\w.])(\d+\.\d+)(?=\s*(?:→\s*\d+\.\d+\s*)?(?:ms|s)\b)")


def reported_numbers() -> set[Decimal]:
    found = set()
    for path in (paths.data_dir() / "reported").glob("*.csv"):
        frame = pd.read_csv(path)
        for column in frame.select_dtypes("number").columns:
            found |= {Decimal(repr(float(v))) for v in frame[column].dropna()}
    return found


def quotes():
    out = []
    for path in sorted(paths.book_dir().rglob("*.md")):
        for paragraph in re.split(r"\n\s*\n", path.read_text()):
            if not SEED.search(paragraph) or "```" in paragraph:
                continue
            text = SEED.sub("", paragraph)
            for number in TIMES.findall(text):
                out.append(pytest.param(number, id=f"{path.relative_to(paths.book_dir())}:{number}"))
    return out


def is_reported(number: str) -> bool:
    quoted = Decimal(number)
    places = Decimal(1).scaleb(quoted.as_tuple().exponent)
    return any(v.quantize(places) == quoted for v in reported_numbers())


def test_the_check_rejects_a_number_no_write_up_reports():
    assert is_reported("49.44") and is_reported("33.53")   # seed 001's C3 before and after (33.5331)
    assert not is_reported("49.45") and not is_reported("33.54")


@pytest.mark.parametrize("number", quotes())
def test_quoted_number_is_reported(number):
    assert is_reported(number), f"{number} is quoted from a write-up but is not in data/reported/"
