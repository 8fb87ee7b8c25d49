"""Replay a source alone, and write it as a standalone reproducer."""
