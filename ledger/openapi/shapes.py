"""Typed shapes of the JSON the service keeps as documents, for the OpenAPI document only.

A hold's `usage`, `reservation` and `charge`, a quote's `charge` / `reservation`, and a
price document travel as JSON objects that the service stores and returns as they are
(JSONB), and request bodies carrying a usage or a price document are read by the strict
readers (`pricing.usage.parse_usage`, `pricing.document.parse_price_document`). These
Structs describe those objects field by field; they are never used to decode a request
or build a response, so documenting them cannot change what the service accepts.

Invariants kept here:
- every count the pricing engine reads is a field of `Usage` (P, C, R, W, W5, W1 and the
  reasoning tokens), optional ones nullable (JSON null is the same as absent);
- `Usage` and its detail objects allow additional properties: fields the ledger does not
  price are kept with the hold as sent;
- the price document forbids unknown fields at every level, like its parser;
- amounts and rates are decimal strings (never numbers), with the parser's limits.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from pricing.document import MODEL_NAME_PATTERN
from pricing.tokens import MAX_COMPLETIONS, MAX_TOKENS

Count = Annotated[int, Meta(ge=0, le=MAX_TOKENS, description="a token count: a non-negative integer")]
Limit = Annotated[int, Meta(ge=1, le=MAX_TOKENS)]
Amount = Annotated[
    str,
    Meta(
        pattern=r"^-?[0-9]+(\.[0-9]+)?$",
        description='an exact amount as a plain decimal string (no exponent), e.g. "0.000316"',
    ),
]
Rate = Annotated[
    str,
    Meta(
        pattern=r"^((0|[1-9][0-9]{0,5})(\.[0-9]{1,6})?|1000000(\.0{1,6})?)$",
        max_length=64,
        description="currency per 1,000,000 tokens, a decimal string with at most 6 decimals, "
        "at most 1000000",
    ),
]
# What pricing.document reads for `effective_at`: a date and time with an offset.
RFC3339_WITH_OFFSET = (
    r"^(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]"
    r"(:[0-5][0-9](\.[0-9]{1,6})?)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
Tier = Literal["standard", "long_context"]
LineCategory = Literal["input", "cached_input", "cache_write_5m", "cache_write_1h", "cache_write", "output"]


class PromptTokensDetails(msgspec.Struct, frozen=True):
    """Parts of `prompt_tokens`: cache reads (R) and cache writes (W)."""

    cached_tokens: Count | None = None
    cache_write_tokens: (
        Annotated[
            int,
            Meta(
                ge=0,
                le=MAX_TOKENS,
                description="W; when absent: claude_cache_creation_5_m_tokens"
                " + claude_cache_creation_1_h_tokens",
            ),
        ]
        | None
    ) = None


class CompletionTokensDetails(msgspec.Struct, frozen=True):
    """Parts of `completion_tokens`; reasoning tokens are charged as output."""

    reasoning_tokens: Count | None = None


class Usage(msgspec.Struct, frozen=True):
    """The upstream usage object as the gateway received it.

    Valid usage: every count a non-negative integer, W5 + W1 <= W, R + W <= P and
    reasoning <= C; otherwise 422 `usage_invalid` naming the field. Other fields are kept
    as sent and not priced.
    """

    prompt_tokens: Count
    completion_tokens: Count
    total_tokens: Count | None = None
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None
    claude_cache_creation_5_m_tokens: Count | None = None
    claude_cache_creation_1_h_tokens: Count | None = None


class Reservation(msgspec.Struct, frozen=True):
    """How a hold was sized: A x input_rate / 10^6 + O x n x output_rate / 10^6."""

    input_allowance: Count
    output_allowance: Count
    n: Annotated[int, Meta(ge=1, le=MAX_COMPLETIONS)]
    input_rate: Rate
    output_rate: Rate
    tier: Tier
    amount: Amount


class ChargeLine(msgspec.Struct, frozen=True):
    """tokens x rate / 1,000,000, exact."""

    category: LineCategory
    tokens: Count
    rate: Rate
    amount: Amount


class Charge(msgspec.Struct, frozen=True):
    """The charge of a usage: the exact sum of its lines (zero-token lines may be left out)."""

    amount: Amount
    tier: Tier
    lines: list[ChargeLine]


class Rates(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One rate table; `input` and `output` are required, the other categories optional."""

    input: Rate
    output: Rate
    # Absent (never null) to use the category's fallback.
    cached_input: Rate | msgspec.UnsetType = msgspec.UNSET
    cache_write: Rate | msgspec.UnsetType = msgspec.UNSET
    cache_write_5m: Rate | msgspec.UnsetType = msgspec.UNSET
    cache_write_1h: Rate | msgspec.UnsetType = msgspec.UNSET


class LongContext(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Rates for the whole request once prompt_tokens > above_input_tokens (same categories)."""

    above_input_tokens: Limit
    rates: Rates


class ModelPrice(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    model: Annotated[
        str,
        Meta(
            pattern=MODEL_NAME_PATTERN,
            max_length=128,
            description="letters, digits and ._:/@+- starting with a letter or digit",
        ),
    ]
    max_input_tokens: Limit
    max_output_tokens: Limit
    rates: Rates
    long_context: LongContext | None = None
    # Catalogue fields (pricing.catalogue); absent or null: the rules without them apply.
    default_output_tokens: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_TOKENS,
                description="the output allowance when a request names none; at most max_output_tokens",
            ),
        ]
        | None
    ) = None
    max_n: (
        Annotated[int, Meta(ge=1, le=MAX_COMPLETIONS, description="the most completions per request")] | None
    ) = None
    retires_at: (
        Annotated[
            str,
            Meta(
                pattern=RFC3339_WITH_OFFSET,
                description="RFC 3339 with a time zone offset: from then on the model is refused (410)",
            ),
        ]
        | None
    ) = None


class PriceDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A price document: what finance publishes as a new immutable version."""

    currency: Annotated[str, Meta(pattern=r"^[A-Z]{3}$")]
    models: Annotated[list[ModelPrice], Meta(min_length=1)]
    effective_at: (
        Annotated[str, Meta(pattern=RFC3339_WITH_OFFSET, description="RFC 3339 with a time zone offset")]
        | None
    ) = None  # absent or null: when published
    source: Annotated[str | None, Meta(description="free text naming where the rates come from")] = None
    replace: Annotated[
        bool,
        Meta(
            description="publish only: true allows the document to drop models the active version "
            "prices; not stored, not part of the content hash"
        ),
    ] = False


Percent = Annotated[
    str,
    Meta(
        pattern=r"^(-?(0|[1-9][0-9]?)(\.[0-9]{1,4})?|-100(\.0{1,4})?|[1-9][0-9]{2}(\.[0-9]{1,4})?|1000(\.0{1,4})?)$",
        description="a percentage as a decimal string within [-100, 1000], at most 4 decimal places",
    ),
]
PlanModelName = Annotated[str, Meta(pattern=MODEL_NAME_PATTERN, max_length=128)]


class PlanLongContext(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The override's long-context rates (the list model's threshold applies)."""

    rates: Rates


class PlanModel(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One model of a plan: `adjust_percent`, or `rates` (+ `long_context`), never both."""

    adjust_percent: Percent | msgspec.UnsetType = msgspec.UNSET
    rates: Rates | msgspec.UnsetType = msgspec.UNSET
    long_context: PlanLongContext | msgspec.UnsetType = msgspec.UNSET


class PlanDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A price plan revision's document (docs/plans.md)."""

    adjust_percent: Percent | msgspec.UnsetType = msgspec.UNSET
    models: dict[PlanModelName, PlanModel] | msgspec.UnsetType = msgspec.UNSET


DOCUMENTED = (Usage, Reservation, Charge, PriceDocument, PlanDocument)
