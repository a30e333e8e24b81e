"""A faulty network between the client and a real ledger (outside the system, so it may be faked).

`Faults` forwards every request to the real server through httpx's own transport, except
that the first requests whose path ends with a given suffix meet a planned fault:
- "lost": the request is forwarded and lands, then the answer is lost (a read timeout);
- "refused": the request never leaves (a connect error), nothing lands;
- "503": a proxy answers 503 without forwarding, nothing lands.
`sent` records every attempt (method, path, what happened).
"""

from __future__ import annotations

import httpx

Plan = dict[str, list[str]]


class _Plan:
    def __init__(self, plan: Plan) -> None:
        self.plan = {suffix: list(faults) for suffix, faults in plan.items()}
        self.sent: list[tuple[str, str, str]] = []

    def fault_for(self, request: httpx.Request) -> str | None:
        for suffix, faults in self.plan.items():
            if request.url.path.endswith(suffix) and faults:
                return faults.pop(0)
        return None

    def attempts(self, suffix: str) -> int:
        return sum(1 for _, path, _ in self.sent if path.endswith(suffix))


def _unavailable(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        503,
        json={
            "error": {
                "type": "service_unavailable",
                "code": "proxy_503",
                "message": "upstream busy",
                "param": None,
            }
        },
        request=request,
    )


class AsyncFaults(httpx.AsyncBaseTransport, _Plan):
    def __init__(self, plan: Plan) -> None:
        _Plan.__init__(self, plan)
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        fault = self.fault_for(request)
        self.sent.append((request.method, request.url.path, fault or "forwarded"))
        if fault == "refused":
            raise httpx.ConnectError("connection refused (planned)", request=request)
        if fault == "503":
            return _unavailable(request)
        response = await self.inner.handle_async_request(request)
        if fault == "lost":
            await response.aread()
            await response.aclose()
            raise httpx.ReadTimeout("the answer was lost (planned)", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class Faults(httpx.BaseTransport, _Plan):
    def __init__(self, plan: Plan) -> None:
        _Plan.__init__(self, plan)
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        fault = self.fault_for(request)
        self.sent.append((request.method, request.url.path, fault or "forwarded"))
        if fault == "refused":
            raise httpx.ConnectError("connection refused (planned)", request=request)
        if fault == "503":
            return _unavailable(request)
        response = self.inner.handle_request(request)
        if fault == "lost":
            response.read()
            response.close()
            raise httpx.ReadTimeout("the answer was lost (planned)", request=request)
        return response

    def close(self) -> None:
        self.inner.close()
