"""The audit log: who (token identity, never the token) did what money or price action, and why."""
