"""Holds: reserve, checkpoint, interrupt, settle, release, and true-ups of late settles."""
