"""Reading the configured price sources (LEDGER_PRICE_SOURCES) into one document.

A source is a JSON file, a folder (every *.json in it, sorted), or an http(s) URL
answering a price document. All sources are merged (same currency, no model twice)
into one document, so a refresh compares and publishes the whole price list at once.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Sequence
from pathlib import Path

from pricing.bundled import load_sheet, merge_documents
from pricing.document import PriceDocument, parse_price_document
from pricing.errors import PriceDocumentInvalid


class SourceError(RuntimeError):
    """A configured source cannot be read."""


def _read(source: str) -> list[tuple[str, PriceDocument]]:
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=20) as response:
                return [(source, parse_price_document(response.read()))]
        except OSError as error:
            raise SourceError(f"cannot fetch {source}: {error}") from error
    path = Path(source)
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise SourceError(f"{source}: folder has no *.json price sheets")
        return [(f.name, load_sheet(f)) for f in files]
    if path.is_file():
        return [(path.name, load_sheet(path))]
    raise SourceError(f"{source}: no such file or folder")


def load_sources(sources: Sequence[str]) -> PriceDocument:
    """Every source merged into one document; `PriceDocumentInvalid` or `SourceError` on failure."""
    loaded = [item for source in sources for item in _read(source)]
    if len(loaded) == 1:
        return loaded[0][1]
    label = " | ".join(f"{name}: {doc.source}" for name, doc in loaded)
    try:
        return merge_documents([doc for _, doc in loaded], source=label)
    except PriceDocumentInvalid:
        raise
