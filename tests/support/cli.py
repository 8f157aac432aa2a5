"""The CLI run as a user runs it: ``specchat ARGS`` in a fresh Python process, and the
check that a failure is one line on stderr with exit code 2. tests/support/tiers.py tags every
test that calls these 'subprocess'."""

from __future__ import annotations

import os
import subprocess
import sys

MAIN = "import sys; from specchat.cli import main; sys.exit(main(sys.argv[1:]))"


def run_cli(*args: str, env_extra: dict | None = None, env: dict | None = None, code_prefix: str = "",
            timeout: int = 300, cwd=None) -> subprocess.CompletedProcess:
    """``specchat *args``; ``code_prefix``: Python run first in the same process (to plant a
    fault, e.g. block an import); ``env``: the whole environment (default: this one's),
    ``env_extra``: variables added to it."""
    env = {**(os.environ if env is None else env), **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", code_prefix + MAIN, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    """stderr's lines, less blank ones and llama.cpp's and transformers' own chatter."""
    return [line for line in result.stderr.splitlines()
            if line.strip() and not line.startswith("[") and "Loading weights" not in line]


def assert_one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    """Exit code 2, no traceback, one line holding every word; returns the line."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]
