"""ledger_client: the gateway's Python client for the ledger (async and sync, on httpx).

Self-contained: it imports nothing from the service (`ledger`, `pricing`, `workers`),
only the standard library and httpx, so a gateway can ship it alone.
"""

from ledger_client.client import AsyncLedgerClient, LedgerClient
from ledger_client.errors import (
    BudgetExceeded,
    InsufficientFunds,
    LedgerError,
    LedgerUnavailable,
    ModelRetired,
)
from ledger_client.models import (
    Balance,
    Charge,
    ChargeLine,
    ChargeQuote,
    Hold,
    HoldState,
    Notice,
    PlanRef,
    Reservation,
    ReservationQuote,
    Tier,
)
from ledger_client.retry import NO_RETRY, RetryPolicy
from ledger_client.streaming import AsyncHoldSession, HoldSession
from ledger_client.usage import from_anthropic, from_openai_chat, from_openai_responses

__all__ = [
    "NO_RETRY",
    "AsyncHoldSession",
    "AsyncLedgerClient",
    "Balance",
    "BudgetExceeded",
    "Charge",
    "ChargeLine",
    "ChargeQuote",
    "Hold",
    "HoldSession",
    "HoldState",
    "InsufficientFunds",
    "LedgerClient",
    "LedgerError",
    "LedgerUnavailable",
    "ModelRetired",
    "Notice",
    "PlanRef",
    "Reservation",
    "ReservationQuote",
    "RetryPolicy",
    "Tier",
    "from_anthropic",
    "from_openai_chat",
    "from_openai_responses",
]
