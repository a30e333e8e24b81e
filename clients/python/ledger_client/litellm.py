"""Billing for the LiteLLM proxy: a `CustomLogger` that reserves, settles and releases in the ledger.

Load it from the proxy's `config.yaml` (`pip install 'ledger-client[litellm]'`):

    litellm_settings:
      callbacks: ledger_client.litellm.ledger_billing   # configured from LEDGER_* variables

or build `LedgerBilling(HookSettings(...))` in a module beside the config (docs/litellm.md).

One proxy request, one hold, keyed by LiteLLM's `litellm_call_id` (the reserve's
idempotency key). Invariants:
- nothing goes upstream without a hold: a refused or failed reserve raises the ledger's
  status and message as the proxy's HTTP error before the model is called;
- every hold the hook made is resolved once by the hook or left, on purpose, to the
  ledger's reconciler: a response with usage settles it; a failure before any output
  releases it; a stream that breaks after output interrupts it with the usage seen (or,
  with none seen, leaves it open for the reconciler);
- amounts stay `Decimal` / decimal strings: the charge reaches LiteLLM's float cost fields
  (`x-litellm-response-cost`, `_hidden_params["response_cost"]`) only as the ledger's string.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from fastapi import HTTPException
from litellm.integrations.custom_logger import CustomLogger

from ledger_client._litellm_config import (
    BILLED_CALLS,
    STREAMED_CALLS,
    HookSettings,
    ledger_usage,
    reserve_limits,
    resolve_account,
    response_usage,
)
from ledger_client.client import AsyncLedgerClient
from ledger_client.errors import LedgerError
from ledger_client.models import Hold

log = logging.getLogger("ledger_client.litellm")

# Settled charges kept for the response-headers hook, which LiteLLM calls after the success hook.
_CHARGES_KEPT = 10_000


@dataclass(slots=True)
class _Pending:
    """A hold the hook made and has not resolved yet."""

    hold_id: str
    call_type: str


def _refusal(error: LedgerError) -> HTTPException:
    """The ledger's refusal as the proxy's HTTP error: its status, code and message."""
    detail: dict[str, Any] = {
        "message": f"ledger: {error.message}",
        "type": error.type,
        "code": error.code,
        "param": error.param,
    }
    extra = error.body.get("error") if isinstance(error.body, Mapping) else None
    if isinstance(extra, Mapping):
        for key in ("required", "available", "currency", "budget_key", "retires_at"):
            if extra.get(key) is not None:
                detail[key] = extra[key]
    return HTTPException(status_code=error.status, detail={"error": detail})


def _call_id(data: Mapping[str, Any]) -> str | None:
    value = data.get("litellm_call_id")
    return value if isinstance(value, str) and value else None


class LedgerBilling(CustomLogger):  # type: ignore[misc]  # litellm is untyped for mypy here
    """The proxy hook. `settings` as `HookSettings`; `client` to share an `AsyncLedgerClient`."""

    def __init__(self, settings: HookSettings, client: AsyncLedgerClient | None = None) -> None:
        super().__init__()
        self.settings = settings
        self._client = client
        self._pending: dict[str, _Pending] = {}
        # Call ids being reserved now, and failure hooks still to come for requests refused
        # as duplicates of one in flight (their failure hook must not release the first's hold).
        self._reserving: set[str] = set()
        self._duplicates: dict[str, int] = {}
        self._charges: OrderedDict[str, tuple[str, str]] = OrderedDict()

    @property
    def ledger(self) -> AsyncLedgerClient:
        if self._client is None:
            self._client = AsyncLedgerClient(
                self.settings.url, self.settings.token, timeout=self.settings.timeout
            )
        return self._client

    # -- before the call -------------------------------------------------------------------

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        """Reserve the request's worst case; refuse (the ledger's status) when the ledger does."""
        call_id = _call_id(data)
        if call_id is None:
            raise HTTPException(500, {"error": {"message": "ledger: the request has no litellm_call_id"}})
        if call_type not in BILLED_CALLS:
            raise HTTPException(
                403,
                {
                    "error": {
                        "message": f"ledger: {call_type} requests are not billed here",
                        "code": "not_billed",
                    }
                },
            )
        if data.get("stream") is True and call_type not in STREAMED_CALLS:
            raise HTTPException(
                403,
                {
                    "error": {
                        "message": f"ledger: streamed {call_type} requests are not billed here "
                        "(their usage cannot be read); send it without stream",
                        "code": "not_billed",
                    }
                },
            )
        if call_id in self._pending or call_id in self._reserving:
            self._duplicates[call_id] = self._duplicates.get(call_id, 0) + 1
            raise HTTPException(409, {"error": {"message": f"ledger: call {call_id} is already in flight"}})
        account_id, source = resolve_account(
            self.settings,
            data,
            getattr(user_api_key_dict, "team_id", None),
            getattr(user_api_key_dict, "user_id", None),
        )
        if account_id is None:
            raise HTTPException(
                403, {"error": {"message": "ledger: no ledger account for this key", "code": "no_account"}}
            )
        requested = str(data.get("model", ""))
        model = self.settings.model_map.get(requested, requested)
        try:
            limits = reserve_limits(data)
        except ValueError as error:
            raise HTTPException(400, {"error": {"message": f"ledger: {error}"}}) from error
        alias = getattr(user_api_key_dict, "key_alias", None)
        self._reserving.add(call_id)
        try:
            hold = await self.ledger.reserve(
                account_id,
                model,
                idempotency_key=call_id,
                ttl_seconds=self.settings.ttl_seconds,
                budget_key=alias if isinstance(alias, str) and alias else None,
                metadata={"litellm_call_id": call_id, "litellm_model": requested, "account_from": source},
                max_output_tokens=limits.get("max_output_tokens"),
                n=limits.get("n"),
            )
        except LedgerError as error:
            raise _refusal(error) from error
        finally:
            self._reserving.discard(call_id)
        if hold.state != "open":
            # The same call id was billed before (a client may send x-litellm-call-id): never
            # serve a second answer on a hold that is already resolved.
            raise HTTPException(
                409, {"error": {"message": f"ledger: call {call_id} was already billed", "code": "conflict"}}
            )
        self._pending[call_id] = _Pending(hold.id, call_type)
        if data.get("stream") is True and call_type == "acompletion":
            options = data.get("stream_options")
            options = dict(options) if isinstance(options, Mapping) else {}
            if options.get("include_usage") is not True:
                data["stream_options"] = {**options, "include_usage": True}
        return data

    # -- after the call --------------------------------------------------------------------

    async def async_post_call_success_hook(
        self, data: dict[str, Any], user_api_key_dict: Any, response: Any
    ) -> Any:
        """A complete (non-streamed) answer: settle its usage; the charge goes to LiteLLM's cost."""
        call_id = _call_id(data)
        pending = self._pending.pop(call_id, None) if call_id else None
        if pending is None or call_id is None:
            return response
        usage = response_usage(response)
        if usage is None:
            # No usage, no charge to compute: the hold stays open for the reconciler.
            log.error("ledger: response without usage; hold %s left to the reconciler", pending.hold_id)
            return response
        try:
            settled = await self.ledger.settle(pending.hold_id, ledger_usage(pending.call_type, usage))
        except (LedgerError, TypeError, ValueError) as error:
            log.error("ledger: settle of hold %s failed (%s); usage %r", pending.hold_id, error, usage)
            return response
        self._record_charge(call_id, settled)
        amount = self._charge_text(settled)
        hidden = getattr(response, "_hidden_params", None)
        if isinstance(hidden, dict):
            hidden["response_cost"] = amount  # the exact figure, as a string
        return response

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        """The call failed before any answer: release the hold in full."""
        call_id = _call_id(request_data)
        if call_id is not None and call_id in self._duplicates:
            # This request was refused as a duplicate: the hold belongs to the one in flight.
            self._duplicates[call_id] -= 1
            if self._duplicates[call_id] <= 0:
                del self._duplicates[call_id]
            return
        pending = self._pending.pop(call_id, None) if call_id else None
        if pending is None:
            return
        try:
            await self.ledger.release(pending.hold_id)
        except LedgerError as error:
            log.error("ledger: release of hold %s failed (%s); the reconciler will", pending.hold_id, error)

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        """Pass the stream through, keep its last usage; settle at its end, or on a break
        interrupt with the usage seen (none seen: the hold stays open for the reconciler)."""
        call_id = _call_id(request_data)
        pending = self._pending.get(call_id) if call_id else None
        if pending is None or call_id is None:
            async for item in response:
                yield item
            return
        usage: Any = None
        produced = False
        try:
            async for chunk in response:
                usage = _chunk_usage(chunk) or usage
                produced = True
                yield chunk
        except BaseException:
            self._pending.pop(call_id, None)
            await self._broken(pending, usage or _kept_usage(response), produced)
            raise
        self._pending.pop(call_id, None)
        await self._stream_done(pending, usage or _kept_usage(response))

    async def _stream_done(self, pending: _Pending, usage: Any) -> None:
        try:
            if usage is None:
                log.error(
                    "ledger: stream ended without usage; hold %s left to the reconciler", pending.hold_id
                )
                await self.ledger.interrupt(pending.hold_id)
            else:
                await self.ledger.settle(pending.hold_id, ledger_usage(pending.call_type, usage))
        except (LedgerError, TypeError, ValueError) as error:
            log.error("ledger: resolving hold %s after its stream failed: %s", pending.hold_id, error)

    async def _broken(self, pending: _Pending, usage: Any, produced: bool) -> None:
        try:
            if usage is not None:
                await self.ledger.interrupt(pending.hold_id, ledger_usage(pending.call_type, usage))
            elif produced:
                await self.ledger.interrupt(pending.hold_id)
            else:
                await self.ledger.release(pending.hold_id)
        except (LedgerError, TypeError, ValueError) as error:
            log.error("ledger: resolving hold %s after a broken stream failed: %s", pending.hold_id, error)

    async def async_post_call_response_headers_hook(
        self,
        data: dict[str, Any],
        user_api_key_dict: Any,
        response: Any,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, object] | None = None,
    ) -> dict[str, str] | None:
        """`x-ledger-hold-id` on every billed answer; once settled, `x-ledger-charge` and
        `x-litellm-response-cost` carry the ledger's exact charge (a decimal string)."""
        call_id = _call_id(data)
        if call_id is None:
            return None
        done = self._charges.pop(call_id, None)
        if done is not None:
            hold_id, amount = done
            return {"x-ledger-hold-id": hold_id, "x-ledger-charge": amount, "x-litellm-response-cost": amount}
        pending = self._pending.get(call_id)
        return {"x-ledger-hold-id": pending.hold_id} if pending is not None else None

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _charge_text(hold: Hold) -> str:
        amount = hold.charge.amount if hold.charge is not None else Decimal(0)
        return format(amount, "f")

    def _record_charge(self, call_id: str, hold: Hold) -> None:
        self._charges[call_id] = (hold.id, self._charge_text(hold))
        while len(self._charges) > _CHARGES_KEPT:
            self._charges.popitem(last=False)


def _chunk_usage(chunk: Any) -> Any:
    """The usage a streamed chunk carries: a chat chunk's `usage`, or a Responses API
    `response.completed` event's `response.usage`."""
    usage = getattr(chunk, "usage", None)
    if usage is not None:
        return usage
    inner = getattr(chunk, "response", None)
    return getattr(inner, "usage", None) if inner is not None else None


def _kept_usage(stream: Any) -> Any:
    """The last usage LiteLLM's stream wrapper received but did not pass on yet: it holds a
    provider's usage chunk back until the stream's end, so a stream that breaks just after it
    never yields it (`CustomStreamWrapper.chunks` keeps it)."""
    for chunk in reversed(getattr(stream, "chunks", None) or ()):
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            return usage
    return None


def __getattr__(name: str) -> Any:
    """`ledger_client.litellm.ledger_billing`: the hook configured from the environment
    (`HookSettings.from_env`), built when the proxy first asks for it."""
    if name == "ledger_billing":
        hook = LedgerBilling(HookSettings.from_env())
        globals()[name] = hook
        return hook
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
