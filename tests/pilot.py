"""Helpers shared by the Pilot tests of the TUI."""

from __future__ import annotations

import time

SIZE = (130, 40)


async def wait_for(pilot, condition, timeout: float = 60.0, what: str = "condition") -> None:
    """Polls ``condition`` while the app runs; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.05)
