"""Every setting `ledger/settings.py` reads is documented: in the README's configuration table
and in docs/configuration.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Removed from ledger/settings.py; documented only as history (docs/experiments/).
REMOVED = {"LEDGER_BATCH_DEPTH"}


def settings_read() -> set[str]:
    source = (ROOT / "ledger" / "settings.py").read_text()
    found = set(re.findall(r"\"((?:LEDGER|OTEL)_[A-Z_]*[A-Z])\"", source))
    assert not found & REMOVED, f"settings.py reads removed settings again: {found & REMOVED}"
    return found


def test_the_settings_are_found() -> None:
    assert {"LEDGER_DATABASE_URL", "LEDGER_PORT", "OTEL_EXPORTER_OTLP_ENDPOINT"} <= settings_read()


@pytest.mark.parametrize("doc", ["README.md", "docs/configuration.md"])
def test_every_setting_is_in_the_configuration_table(doc: str) -> None:
    table = "\n".join(line for line in (ROOT / doc).read_text().splitlines() if line.startswith("| `"))
    missing = sorted(name for name in settings_read() if f"`{name}`" not in table)
    assert not missing, f"{doc} lacks {missing}"


@pytest.mark.parametrize("doc", ["README.md", "docs/configuration.md"])
def test_removed_settings_are_not_listed(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert not [name for name in REMOVED if name in text]
