"""The finance console: a server-rendered web UI for finance staff at `/console`.

Logged in with an admin token (session cookie, see `session.py`); every page reads
and writes through the same services as the admin API. `CONTROLLERS` and
`template_config()` are what `ledger.app` registers; the templates get the display
filters of `display.py` (rounded amounts with the exact value in `title`, UTC times,
hold links).
"""

from __future__ import annotations

from pathlib import Path

from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

from ledger.console.accounts_pages import AccountPages
from ledger.console.controller import ConsoleController, ConsoleLoginController
from ledger.console.display import FILTERS
from ledger.console.holds_pages import HoldPages
from ledger.console.revenue_pages import RevenuePages

TEMPLATES = Path(__file__).resolve().parent / "templates"
CONTROLLERS = [ConsoleLoginController, ConsoleController, AccountPages, HoldPages, RevenuePages]


def _register_filters(engine: JinjaTemplateEngine) -> None:
    engine.engine.filters.update(FILTERS)


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    return TemplateConfig(directory=TEMPLATES, engine=JinjaTemplateEngine, engine_callback=_register_filters)
