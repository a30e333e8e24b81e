"""ledger: the billing and wallet ledger behind an LLM API gateway."""

__version__ = "0.1.0"
