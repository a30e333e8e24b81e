"""The price sheets shipped with the package (``pricing/sheets/*.json``), and merging them.

Invariants kept here:
- every bundled sheet is a valid price document (the unit tests load each one);
- `merge_documents` never guesses: all documents must share one currency, and a model
  priced by two documents is refused rather than resolved by order, so publishing the
  merged sheets as one price version cannot silently pick one of two prices.

This is the only module of `pricing` that reads files, and only when asked to.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from pricing.document import ModelPrice, PriceDocument, parse_price_document
from pricing.errors import PriceDocumentInvalid

SHEETS_DIR = Path(__file__).resolve().parent / "sheets"

# Models the gateway serves that the bundled sheets deliberately leave unpriced (the
# "Left out" table of sheets/README.md). The ledger counts them as known models: a
# request for one is "no valid price yet" (503), not "no such model" (404).
UNPRICED_MODELS = frozenset({"gemini-3.5-flash"})


def bundled_sheet_paths() -> list[Path]:
    """The bundled sheets, one JSON file per provider, sorted by file name."""
    return sorted(SHEETS_DIR.glob("*.json"))


def load_sheet(path: Path) -> PriceDocument:
    """Parse one sheet; a refusal keeps its `param` and names the file in its message."""
    try:
        return parse_price_document(path.read_bytes())
    except PriceDocumentInvalid as exc:
        raise PriceDocumentInvalid(exc.param, f"{exc.detail} (in {path.name})") from exc


def merge_documents(
    docs: Sequence[PriceDocument], *, source: str, effective_at: datetime | None = None
) -> PriceDocument:
    """One document holding every model of `docs`, in order.

    Refused (`PriceDocumentInvalid`): no documents; documents in different currencies
    (param ``currency``); a model in more than one document (param ``models[i].model``,
    `i` its index in the merged list).
    """
    if not docs:
        raise PriceDocumentInvalid("models", "nothing to merge: no price documents given")
    currency = docs[0].currency
    models: list[ModelPrice] = []
    seen: set[str] = set()
    for doc in docs:
        if doc.currency != currency:
            raise PriceDocumentInvalid(
                "currency", f"cannot merge a {doc.currency} document into a {currency} one"
            )
        for price in doc.models:
            if price.model in seen:
                raise PriceDocumentInvalid(
                    f"models[{len(models)}].model",
                    f"model {price.model!r} is priced by more than one document",
                )
            seen.add(price.model)
            models.append(price)
    return PriceDocument(currency=currency, effective_at=effective_at, source=source, models=tuple(models))


def bundled_document(*, effective_at: datetime | None = None) -> PriceDocument:
    """All bundled sheets merged into one document, its `source` listing each sheet's."""
    sheets = [load_sheet(path) for path in bundled_sheet_paths()]
    source = "bundled price sheets: " + " | ".join(
        f"{path.name}: {doc.source}" for path, doc in zip(bundled_sheet_paths(), sheets, strict=True)
    )
    return merge_documents(sheets, source=source, effective_at=effective_at)
