"""Who is acting, passed from controllers into services (which never see HTTP)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Actor:
    identity: str  # e.g. "finance:alice", "finance:3f2a9c1b7d20e4a5" (ledger.identity), "reconciler", "cli"
    role: str
    request_id: str | None = None

    @property
    def kind(self) -> str:
        """`resolved_by` vocabulary: gateway, reconciler or admin."""
        if self.role == "gateway":
            return "gateway"
        if self.role == "reconciler":
            return "reconciler"
        return "admin"


RECONCILER = Actor(identity="reconciler", role="reconciler")
CLI = Actor(identity="cli", role="admin")
