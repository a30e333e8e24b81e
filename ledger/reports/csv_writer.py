"""The one way the service writes CSV: text cells a spreadsheet cannot run as formulas.

Every CSV the service answers (statements, the revenue report, the console's statement
download) is written through `CsvLayout`, so the rule below holds for all of them.

Invariants:
- a text cell whose first non-blank character is `=`, `+`, `-` or `@`, or that starts
  with a tab, CR or LF, is written with a leading `'` (OWASP's CSV-injection advice):
  a spreadsheet shows it as text instead of evaluating it; the apostrophe stays visible
  in the file, so the original is recoverable by removing it. "Blank" is what
  `str.lstrip()` removes (spaces, tabs, line breaks, other Unicode spaces), because
  spreadsheets skip leading blanks before recognising a formula;
- a numeric column's cell is written as it is only when it is a plain decimal
  (`-1.5`, `0.0024`, `3`): amounts stay numbers. Anything else that reaches a
  numeric column is treated as text, so a column the writer thought numeric can
  never smuggle a formula through;
- quoting of commas, quotes and line breaks is the `csv` module's (RFC 4180);
  an absent value (`None`) is an empty cell.
The JSON forms of the same reports carry the text exactly as recorded.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence

FORMULA_START = frozenset("=+-@")
CONTROL_START = ("\t", "\r", "\n")
_PLAIN_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def neutralise(text: str) -> str:
    """`text` as a spreadsheet-safe cell: prefixed with `'` if a spreadsheet would run it."""
    if text.startswith(CONTROL_START) or text.lstrip()[:1] in FORMULA_START:
        return "'" + text
    return text


def number_cell(value: str) -> str:
    """A numeric column's cell: a plain decimal as it is, anything else neutralised as text."""
    return value if _PLAIN_DECIMAL.fullmatch(value) else neutralise(value)


class CsvLayout:
    """A CSV's columns, and which of them hold numbers (every other column is text)."""

    def __init__(self, columns: Sequence[str], *, numeric: Iterable[str] = ()) -> None:
        self.columns = tuple(columns)
        numbers = frozenset(numeric)
        unknown = numbers - set(self.columns)
        if unknown:
            raise ValueError(f"numeric columns not in the layout: {sorted(unknown)}")
        self._numeric = tuple(name in numbers for name in self.columns)

    def header(self) -> str:
        return self.lines([self.columns], header=True)

    def lines(self, rows: Iterable[Sequence[str | None]], *, header: bool = False) -> str:
        """The rows as CSV text (CRLF line ends); each row has one value per column."""
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        for row in rows:
            if len(row) != len(self.columns):
                raise ValueError(f"a row of {len(row)} cells for {len(self.columns)} columns")
            writer.writerow(
                [
                    self._cell(value, numeric and not header)
                    for value, numeric in zip(row, self._numeric, strict=True)
                ]
            )
        return buffer.getvalue()

    @staticmethod
    def _cell(value: str | None, numeric: bool) -> str:
        if value is None:
            return ""
        return number_cell(value) if numeric else neutralise(value)
