"""Recorded sessions: the crash-safe recorder, replay, exports and history; torch-free, so they
run where torch is not installed (pyproject's import contracts)."""
