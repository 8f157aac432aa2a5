"""The CLI run as a user runs it: ``specchat ARGS`` in a fresh Python process
(``run_cli``), or the same ``main`` in this process (``in_process``), and the check that a
failure is one line on stderr with exit code 2.

tests/support/tiers.py reads what each helper's code names: ``run_cli`` starts a process
('subprocess'), ``in_process`` calls specchat.cli.main ('model': most commands load the
profile's models), the checks alone have no tier."""

from __future__ import annotations

import contextlib
import io
import os
import random
import subprocess
import sys
from dataclasses import dataclass

MAIN = "import sys; from specchat.cli import main; sys.exit(main(sys.argv[1:]))"


def run_cli(*args: str, env_extra: dict | None = None, env: dict | None = None, code_prefix: str = "",
            timeout: int = 300, cwd=None) -> subprocess.CompletedProcess:
    """``specchat *args``; ``code_prefix``: Python run first in the same process (to plant a
    fault, e.g. block an import); ``env``: the whole environment (default: this one's),
    ``env_extra``: variables added to it."""
    env = {**(os.environ if env is None else env), **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", code_prefix + MAIN, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


@dataclass
class Ran:
    """What ``in_process`` gives back: the fields of a CompletedProcess that tests read (not
    that class itself: naming the subprocess module would give the test the tier
    'subprocess')."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def in_process(*args: str, env_extra: dict | None = None, cwd=None) -> Ran:
    """``specchat *args`` as ``run_cli`` runs it, but by calling ``main`` here: no fresh
    interpreter importing torch and transformers again (seconds of CPU each). For a test
    whose point is what main prints and returns, not the process: stdout and stderr are
    Python's streams (a pipe to main: not a terminal), SystemExit is its exit code, and the
    environment, working directory, torch's thread count and the global random states
    (training seeds torch's) are put back as they were, whatever main changed."""
    from specchat.cli import main

    saved_env, saved_cwd, saved_random = dict(os.environ), os.getcwd(), random.getstate()
    torch = sys.modules.get("torch")  # imported already by the test (or main will import it)
    saved_torch = (torch.get_num_threads(), torch.random.get_rng_state()) if torch else None
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update(env_extra or {})
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's usage errors, --help, --version
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                if isinstance(exit_.code, str):
                    print(exit_.code, file=sys.stderr)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        random.setstate(saved_random)
        if saved_torch is not None:
            torch.set_num_threads(saved_torch[0])
            torch.random.set_rng_state(saved_torch[1])
    return Ran(["specchat", *args], code, out.getvalue(), err.getvalue())


def error_lines(result: subprocess.CompletedProcess | Ran) -> list[str]:
    """stderr's lines, less blank ones and llama.cpp's and transformers' own chatter."""
    return [line for line in result.stderr.splitlines()
            if line.strip() and not line.startswith("[") and "Loading weights" not in line]


def assert_one_line_error(result: subprocess.CompletedProcess | Ran, *words: str) -> str:
    """Exit code 2, no traceback, one line holding every word; returns the line."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]
