"""Shared steps of the console tests: log in through the form, read hidden fields."""

from __future__ import annotations

import re
from typing import Any

from litestar.testing import TestClient


def hidden(html: str, name: str, occurrence: int = 0) -> str:
    values = re.findall(rf'name="{name}" value="([^"]*)"', html)
    assert len(values) > occurrence, f"no hidden field {name!r} #{occurrence} in page"
    return values[occurrence]


def login(client: TestClient[Any], token: str, *, next_path: str = "/console/accounts") -> Any:
    client.cookies.clear()
    page = client.get("/console/login")
    assert page.status_code == 200
    return client.post(
        "/console/login",
        data={"nonce": hidden(page.text, "nonce"), "token": token, "next": next_path},
        follow_redirects=False,
    )


def notice(html: str) -> str:
    found = re.search(r'<p class="notice notice-(\w+)"[^>]*>(.*?)</p>', html, re.S)
    assert found, "no notice on the page"
    return f"{found.group(1)}: {' '.join(found.group(2).split())}"


def figure(html: str, name: str) -> tuple[str, str]:
    """A `data-figure` amount as (shown, exact): the rounded text and its `title`."""
    found = re.search(rf'data-figure="{name}"><span class="amount[^"]*" title="([^"]*)">([^<]*)</span>', html)
    assert found, f"no figure {name!r} on the page"
    return found.group(2), found.group(1)


def cells(html: str, css: str) -> list[tuple[str, str]]:
    """Every amount in `<td class="{css}">` as (shown, exact), in page order."""
    pattern = rf'<td class="{css}"><span class="amount[^"]*" title="([^"]*)">([^<]*)</span></td>'
    return [(shown, exact) for exact, shown in re.findall(pattern, html)]
