"""The gateway's clients: `AsyncLedgerClient` and its sync twin `LedgerClient`, on httpx.

Both offer the same calls (reserve, get_hold, checkpoint, settle, interrupt, release,
balance, quote) and the streaming helper `hold(...)`. Every call goes through one retry loop
(see `ledger_client.retry` for what is retried and why that is safe); a refusal raises
`LedgerError` (`InsufficientFunds` on 402), a ledger that stays unreachable raises
`LedgerUnavailable`. The two clients differ only in how they send and wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from ledger_client import _calls
from ledger_client._calls import Call, answer, request_kwargs
from ledger_client.errors import LedgerUnavailable
from ledger_client.models import Balance, ChargeQuote, Hold, ReservationQuote
from ledger_client.retry import RETRYABLE_ERRORS, RETRYABLE_STATUSES, RetryPolicy
from ledger_client.streaming import AsyncHoldSession, HoldSession

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0


def _unreachable(error: Exception, attempts: int) -> LedgerUnavailable:
    return LedgerUnavailable(
        503,
        "ledger_unreachable",
        f"the ledger did not answer after {attempts} attempt(s): {type(error).__name__}: {error}",
    )


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json"}


class AsyncLedgerClient:
    """Async client. Use as `async with AsyncLedgerClient(url, token) as ledger:` or call `aclose()`.

    `transport` is passed to httpx (tests use it to put a faulty network in between).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(token), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncLedgerClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call[T]) -> T:
        attempts = self.retry.attempts
        for attempt in range(1, attempts + 1):
            try:
                response = await self._http.request(call.method, call.path, **request_kwargs(call))
            except RETRYABLE_ERRORS as error:
                if attempt == attempts:
                    raise _unreachable(error, attempts) from error
            else:
                if response.status_code not in RETRYABLE_STATUSES or attempt == attempts:
                    return answer(call, response)
            await asyncio.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def reserve(
        self,
        account_id: str,
        model: str,
        *,
        idempotency_key: str | None = None,
        max_output_tokens: int | None = None,
        max_input_tokens: int | None = None,
        n: int | None = None,
        price_version: str | None = None,
        ttl_seconds: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        budget_key: str | None = None,
    ) -> Hold:
        """Hold the request's worst case. Without `idempotency_key` one is made (and reused on retry).

        `budget_key`: the API key or project whose budget the spend counts against (402
        `budget_exceeded` past it); `metadata` is stored with the hold as given."""
        return await self._send(
            _calls.reserve(
                account_id=account_id,
                model=model,
                idempotency_key=idempotency_key,
                max_output_tokens=max_output_tokens,
                max_input_tokens=max_input_tokens,
                n=n,
                price_version=price_version,
                ttl_seconds=ttl_seconds,
                metadata=metadata,
                budget_key=budget_key,
            )
        )

    async def get_hold(self, hold_id: str) -> Hold:
        return await self._send(_calls.get_hold(hold_id))

    async def hold_by_key(self, account_id: str, idempotency_key: str) -> Hold:
        """The hold a reserve made with this account and idempotency key (the gateway's request
        id); `LedgerError` 404 `hold_not_found` when there is none."""
        return await self._send(_calls.hold_by_key(account_id, idempotency_key))

    async def checkpoint(self, hold_id: str, usage: object) -> Hold:
        """Cumulative usage so far (counts only grow); extends the hold's expiry, charges nothing.

        `usage` as for `settle`."""
        return await self._send(_calls.checkpoint(hold_id, usage))

    async def settle(self, hold_id: str, usage: object) -> Hold:
        """Charge the final usage at the hold's pinned price version; release the rest.

        `usage` is a Mapping in the ledger's shape (OpenAI chat's `usage`, or an adapter's
        output), sent as given; or an SDK usage object, converted by its adapter: openai
        `CompletionUsage` (already the ledger's shape), `ResponseUsage` (`from_openai_responses`),
        anthropic `Usage` / `BetaUsage` (`from_anthropic`). Anything else, including a streamed
        Anthropic `MessageDeltaUsage` on its own, raises `TypeError` and nothing is sent.
        """
        return await self._send(_calls.settle(hold_id, usage))

    async def interrupt(self, hold_id: str, usage: object | None = None) -> Hold:
        """The stream broke: keep the hold (for a later settle or the reconciler), record usage seen
        (as for `settle`)."""
        return await self._send(_calls.interrupt(hold_id, usage))

    async def release(self, hold_id: str) -> Hold:
        """Nothing was produced: release in full, charge nothing."""
        return await self._send(_calls.release(hold_id))

    async def balance(self, account_id: str) -> Balance:
        return await self._send(_calls.balance(account_id))

    async def quote(
        self,
        model: str,
        *,
        usage: object | None = None,
        price_version: str | None = None,
        currency: str | None = None,
        max_output_tokens: int | None = None,
        max_input_tokens: int | None = None,
        n: int | None = None,
        account_id: str | None = None,
    ) -> ChargeQuote | ReservationQuote:
        """Price a usage (`ChargeQuote`, `usage` as for `settle`) or size a reservation
        (`ReservationQuote`, from the `max_*_tokens` and `n`); touches no balance. With
        `account_id`, prices with that account's price plan (the quote's `plan` says which)."""
        return await self._send(
            _calls.quote(
                model=model,
                usage=usage,
                price_version=price_version,
                currency=currency,
                max_output_tokens=max_output_tokens,
                max_input_tokens=max_input_tokens,
                n=n,
                account_id=account_id,
            )
        )

    def hold(self, account_id: str, model: str, **reserve: Any) -> AsyncHoldSession:
        """`async with ledger.hold(account_id=..., model=..., max_output_tokens=...) as h:` for one
        streamed request; see `AsyncHoldSession` for what happens on exit."""
        return AsyncHoldSession(self, account_id, model, reserve)


class LedgerClient:
    """Sync client, the same calls as `AsyncLedgerClient`: `with LedgerClient(url, token) as ledger:`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(token), timeout=timeout, transport=transport
        )

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[T]) -> T:
        attempts = self.retry.attempts
        for attempt in range(1, attempts + 1):
            try:
                response = self._http.request(call.method, call.path, **request_kwargs(call))
            except RETRYABLE_ERRORS as error:
                if attempt == attempts:
                    raise _unreachable(error, attempts) from error
            else:
                if response.status_code not in RETRYABLE_STATUSES or attempt == attempts:
                    return answer(call, response)
            time.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def reserve(
        self,
        account_id: str,
        model: str,
        *,
        idempotency_key: str | None = None,
        max_output_tokens: int | None = None,
        max_input_tokens: int | None = None,
        n: int | None = None,
        price_version: str | None = None,
        ttl_seconds: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        budget_key: str | None = None,
    ) -> Hold:
        return self._send(
            _calls.reserve(
                account_id=account_id,
                model=model,
                idempotency_key=idempotency_key,
                max_output_tokens=max_output_tokens,
                max_input_tokens=max_input_tokens,
                n=n,
                price_version=price_version,
                ttl_seconds=ttl_seconds,
                metadata=metadata,
                budget_key=budget_key,
            )
        )

    def get_hold(self, hold_id: str) -> Hold:
        return self._send(_calls.get_hold(hold_id))

    def hold_by_key(self, account_id: str, idempotency_key: str) -> Hold:
        """As `AsyncLedgerClient.hold_by_key`."""
        return self._send(_calls.hold_by_key(account_id, idempotency_key))

    def checkpoint(self, hold_id: str, usage: object) -> Hold:
        """As `AsyncLedgerClient.checkpoint`; `usage` as for `settle`."""
        return self._send(_calls.checkpoint(hold_id, usage))

    def settle(self, hold_id: str, usage: object) -> Hold:
        """As `AsyncLedgerClient.settle`: a Mapping in the ledger's shape or a recognised SDK usage
        object (openai `CompletionUsage` / `ResponseUsage`, anthropic `Usage` / `BetaUsage`);
        anything else raises `TypeError` before a request is made."""
        return self._send(_calls.settle(hold_id, usage))

    def interrupt(self, hold_id: str, usage: object | None = None) -> Hold:
        """As `AsyncLedgerClient.interrupt`; `usage` as for `settle`."""
        return self._send(_calls.interrupt(hold_id, usage))

    def release(self, hold_id: str) -> Hold:
        return self._send(_calls.release(hold_id))

    def balance(self, account_id: str) -> Balance:
        return self._send(_calls.balance(account_id))

    def quote(
        self,
        model: str,
        *,
        usage: object | None = None,
        price_version: str | None = None,
        currency: str | None = None,
        max_output_tokens: int | None = None,
        max_input_tokens: int | None = None,
        n: int | None = None,
        account_id: str | None = None,
    ) -> ChargeQuote | ReservationQuote:
        """As `AsyncLedgerClient.quote`."""
        return self._send(
            _calls.quote(
                model=model,
                usage=usage,
                price_version=price_version,
                currency=currency,
                max_output_tokens=max_output_tokens,
                max_input_tokens=max_input_tokens,
                n=n,
                account_id=account_id,
            )
        )

    def hold(self, account_id: str, model: str, **reserve: Any) -> HoldSession:
        """`with ledger.hold(account_id=..., model=..., max_output_tokens=...) as h:`; see `HoldSession`."""
        return HoldSession(self, account_id, model, reserve)
