"""One streamed request's hold, as a context manager: reserve on enter, resolve on exit.

    async with ledger.hold(account_id="acme", model="gpt-6-luna", max_output_tokens=800) as h:
        async for chunk in upstream:
            ...
            if chunk.usage:
                await h.checkpoint(from_openai_chat(chunk.usage))
        h.finish(from_openai_chat(final_usage))

On exit (`h.result` is then the hold as the ledger last answered it):
- the block finished, or raised after `finish(usage)` (the usage is complete): settle
  with the final usage; else, on a normal exit, with the last checkpoint's usage;
- the block raised (a broken stream, a cancelled task) before `finish`, after some usage
  was seen: interrupt with the largest usage seen, so the hold stays held for a later
  settle or the reconciler (which settles it with that usage);
- no usage at all was seen: release in full (nothing was produced, nothing is charged).
The block's exception is always re-raised. If resolving the hold fails while the block's
own exception propagates, that exception wins and the ledger's error is added to it as a
note; the hold is then still open and the reconciler resolves it after its expiry.
A reserve refused on enter (e.g. `InsufficientFunds`) raises from the `with` itself.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from ledger_client.models import Hold
from ledger_client.usage import as_ledger_usage

if TYPE_CHECKING:
    from ledger_client.client import AsyncLedgerClient, LedgerClient


class _Session:
    """What both twins track: the hold, the largest usage seen, the final usage."""

    def __init__(self, account_id: str, model: str, reserve: dict[str, Any]) -> None:
        self._account_id = account_id
        self._model = model
        self._reserve = reserve
        self._hold: Hold | None = None
        self.seen: dict[str, Any] | None = None
        self.final: dict[str, Any] | None = None
        self.result: Hold | None = None

    @property
    def hold(self) -> Hold:
        if self._hold is None:
            raise RuntimeError("the hold exists only inside the with block")
        return self._hold

    @property
    def id(self) -> str:
        return self.hold.id

    def finish(self, usage: object) -> None:
        """The request's final usage: settled on exit. Any usage `settle` accepts (converted now,
        so a usage the client refuses raises here, inside the block)."""
        self.final = as_ledger_usage(usage)
        self.seen = self.final

    def _outcome(self, failed: bool) -> tuple[str, dict[str, Any] | None]:
        if self.final is not None:
            return "settle", self.final
        if self.seen is None:
            return "release", None
        return ("interrupt" if failed else "settle"), self.seen


class AsyncHoldSession(_Session):
    def __init__(
        self, client: AsyncLedgerClient, account_id: str, model: str, reserve: dict[str, Any]
    ) -> None:
        super().__init__(account_id, model, reserve)
        self._client = client

    async def __aenter__(self) -> AsyncHoldSession:
        self._hold = await self._client.reserve(self._account_id, self._model, **self._reserve)
        return self

    async def checkpoint(self, usage: object) -> Hold:
        """Record cumulative usage so far (kept locally first, so a broken stream can report it)."""
        self.seen = as_ledger_usage(usage)
        self._hold = await self._client.checkpoint(self.id, self.seen)
        return self._hold

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        action, usage = self._outcome(failed=exc is not None)
        try:
            if action == "settle":
                assert usage is not None
                self.result = await self._client.settle(self.id, usage)
            elif action == "interrupt":
                self.result = await self._client.interrupt(self.id, usage)
            else:
                self.result = await self._client.release(self.id)
        except Exception as error:
            if exc is None:
                raise
            exc.add_note(f"ledger: {action} of hold {self.id} failed: {error}")


class HoldSession(_Session):
    def __init__(self, client: LedgerClient, account_id: str, model: str, reserve: dict[str, Any]) -> None:
        super().__init__(account_id, model, reserve)
        self._client = client

    def __enter__(self) -> HoldSession:
        self._hold = self._client.reserve(self._account_id, self._model, **self._reserve)
        return self

    def checkpoint(self, usage: object) -> Hold:
        self.seen = as_ledger_usage(usage)
        self._hold = self._client.checkpoint(self.id, self.seen)
        return self._hold

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        action, usage = self._outcome(failed=exc is not None)
        try:
            if action == "settle":
                assert usage is not None
                self.result = self._client.settle(self.id, usage)
            elif action == "interrupt":
                self.result = self._client.interrupt(self.id, usage)
            else:
                self.result = self._client.release(self.id)
        except Exception as error:
            if exc is None:
                raise
            exc.add_note(f"ledger: {action} of hold {self.id} failed: {error}")
