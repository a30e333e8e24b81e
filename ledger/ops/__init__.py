"""Operations endpoints: health, readiness, metrics, integrity and the audit log."""
