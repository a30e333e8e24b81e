"""The finance console: a server-rendered web UI for finance staff at `/console`.

Logged in with an admin token (session cookie, see `session.py`); every page reads
and writes through the same services as the admin API. `CONTROLLERS` and
`template_config()` are what `ledger.app` registers.
"""

from __future__ import annotations

from pathlib import Path

from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig

from ledger.console.controller import ConsoleController, ConsoleLoginController

TEMPLATES = Path(__file__).resolve().parent / "templates"
CONTROLLERS = [ConsoleLoginController, ConsoleController]


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    return TemplateConfig(directory=TEMPLATES, engine=JinjaTemplateEngine)
