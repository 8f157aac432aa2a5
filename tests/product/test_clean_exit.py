"""Quit (Ctrl+Q, or the Ctrl+C key), SIGINT and SIGTERM mid-reply, in a real pseudo-terminal: the reply is
cancelled and recorded as such, the terminal is given back as it was (main screen,
mouse and bracketed paste off, cursor shown), and the process is gone within a second
or two. Also: a demo stops with the app, and a crafted recording replayed in the real
TUI writes none of its escape sequences to the terminal.

The app runs through run_app (the CLI's entry point) on an endless fake model
(tests/support/endless_app.py), so a quit always lands mid-reply and no torch is needed.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.crafted import write_crafted

ENDLESS_APP = ROOT / "tests" / "support" / "endless_app.py"  # run as a script: a quit lands mid-reply

# Modes Textual turns on (alternate screen, mouse reporting, bracketed paste, focus
# events) must end off; the cursor must end visible.
MODES_OFF = {"1049", "1000", "1003", "1006", "1015", "2004", "1004"}
MODES_ON = {"25"}
EXIT_WITHIN_S = 2.0


class Terminal:
    """A program on a pty: everything it writes is collected; keys can be typed."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT,
                                     start_new_session=True)
        os.close(slave)
        self.output = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # the program is gone (EIO)
                return
            if not data:
                return
            self.output.extend(data)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def wait_for(self, condition, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"exited early ({self.proc.returncode}): {bytes(self.output)[-2000:]!r}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {bytes(self.output)[-2000:]!r}"
            time.sleep(0.05)

    def finish(self, timeout: float) -> tuple[int | None, float]:
        """(exit code or None if still running after ``timeout``, seconds it took)."""
        started = time.monotonic()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - started
        if code is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(timeout=5)
        os.close(self.master)
        return code, took


def final_modes(output: bytes) -> dict[str, str]:
    modes: dict[str, str] = {}
    for params, state in re.findall(rb"\x1b\[\?([0-9;]+)([hl])", output):
        for mode in params.decode().split(";"):
            modes[mode] = state.decode()
    return modes


def assert_terminal_restored(output: bytes) -> None:
    modes = final_modes(output)
    assert modes.get("1049") == "h" or "1049" in modes, "the app never took the screen"
    left_on = sorted(m for m in MODES_OFF if modes.get(m) == "h")
    left_off = sorted(m for m in MODES_ON if modes.get(m) == "l")
    assert not left_on and not left_off, f"terminal left with modes on {left_on}, off {left_off}"


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {**os.environ, "SPECCHAT_DATA_DIR": str(tmp_path / "data"), "TERM": "xterm-256color",
            "PYTHONPATH": str(ROOT), "COLUMNS": "110", "LINES": "30"}


def recorded(env: dict[str, str]) -> list[dict]:
    files = list((Path(env["SPECCHAT_DATA_DIR"]) / "sessions").glob("*.jsonl"))
    if not files:
        return []
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.endswith("}")]


def steps_recorded(env) -> int:
    return sum(line["type"] == "StepEvent" for line in recorded(env))


@pytest.mark.parametrize("how, code", [("SIGINT", 130), ("SIGTERM", 143), ("ctrl+q", 0), ("ctrl+c", 130)])
def test_quit_mid_reply_cancels_records_restores_and_exits(env, how, code):
    term = Terminal([sys.executable, str(ENDLESS_APP), "chat"], env)
    term.wait_for(lambda: b"ready" in term.output, "the app")
    term.type(b"an endless reply, please\r")
    term.wait_for(lambda: steps_recorded(env) >= 3, "the reply to stream")
    if how == "ctrl+q":
        term.type(b"\x11")
    elif how == "ctrl+c":  # a key in raw mode, not a signal: the README's table says it quits
        term.type(b"\x03")
    else:
        term.proc.send_signal(getattr(signal, how))
    exit_code, took = term.finish(timeout=10)
    assert exit_code == code, f"exit code {exit_code} after {took:.1f} s"
    assert took < EXIT_WITHIN_S, f"took {took:.2f} s to exit"
    assert_terminal_restored(bytes(term.output))
    events = recorded(env)
    steps = [e for e in events if e["type"] == "StepEvent"]
    assert events[-1]["type"] == "TurnFinished" and events[-1]["finish_reason"] == "cancelled"
    # no recorded event lost: every step the reply streamed, in order, and its text whole
    assert [e["step"]["tokens"][0]["id"] for e in steps] == list(range(len(steps)))
    assert events[-1]["text"] == "".join(e["step"]["tokens"][0]["text"] for e in steps)
    assert b"Traceback" not in term.output


@pytest.mark.parametrize("how, code", [("ctrl+q", 0), ("SIGTERM", 143)])
def test_a_quit_during_a_step_that_outlasts_the_grace_still_records_the_turn_cancelled(env, how, code):
    """The fourth step takes a minute and cannot be cancelled, so the app exits before the
    turn loop can close the turn: the recorder closes it, with the three steps' text, and
    a resume keeps that partial reply (it used to read as damaged, and lose it)."""
    from specchat.sessions.resume import resume_from

    term = Terminal([sys.executable, str(ENDLESS_APP), "stall"], env)
    term.wait_for(lambda: b"ready" in term.output, "the app")
    term.type(b"a reply that stalls, please\r")
    term.wait_for(lambda: steps_recorded(env) >= 3, "the reply to stream")
    time.sleep(0.2)  # into the stalled step
    if how == "ctrl+q":
        term.type(b"\x11")
    else:
        term.proc.send_signal(getattr(signal, how))
    exit_code, took = term.finish(timeout=10)
    assert exit_code == code and took < EXIT_WITHIN_S, f"exit {exit_code} after {took:.1f} s"
    events = recorded(env)
    assert [e["type"] for e in events[-2:]] == ["StepEvent", "TurnFinished"]
    assert events[-1]["finish_reason"] == "cancelled" and events[-1]["text"] == "w0 w1 w2 "
    resumed = resume_from(next((Path(env["SPECCHAT_DATA_DIR"]) / "sessions").glob("*.jsonl")))
    assert resumed.damage is None and resumed.pending is None
    assert resumed.history == [{"role": "user", "content": "a reply that stalls, please"},
                               {"role": "assistant", "content": "w0 w1 w2 "}]


def test_quit_while_a_model_loads_does_not_wait_for_it(env):
    """A load cannot be cancelled (nor can one long forward pass): the process must not
    stay alive for it once the app has quit."""
    term = Terminal([sys.executable, str(ENDLESS_APP), "loading"], env)
    term.wait_for(lambda: b"loading" in term.output, "the app")
    time.sleep(0.3)
    term.type(b"\x11")
    exit_code, took = term.finish(timeout=10)
    assert exit_code == 0 and took < EXIT_WITHIN_S, f"exit {exit_code} after {took:.1f} s"
    assert_terminal_restored(bytes(term.output))


def test_a_demo_stops_with_the_app(env):
    term = Terminal([sys.executable, str(ENDLESS_APP), "demo"], env)
    term.wait_for(lambda: any(e["type"] == "TurnFinished" for e in recorded(env)), "the first demo reply")
    time.sleep(0.2)  # into the /pause 30
    term.proc.send_signal(signal.SIGINT)
    exit_code, took = term.finish(timeout=10)
    assert exit_code == 130 and took < EXIT_WITHIN_S, f"exit {exit_code} after {took:.1f} s"
    assert_terminal_restored(bytes(term.output))
    prompts = [e["text"] for e in recorded(env) if e["type"] == "UserMessage"]
    assert prompts == ["short reply"]  # the script did not run on without its app


def test_a_crafted_recording_replayed_in_the_real_tui_writes_no_escape_of_its_own(env, tmp_path):
    path = write_crafted(tmp_path / "crafted.jsonl")
    term = Terminal([sys.executable, "-m", "specchat", "replay", str(path), "--speed", "max"], env)
    term.wait_for(lambda: b"tok2-target" in term.output, "the replay's last token")
    time.sleep(0.3)
    term.type(b"\x11")
    exit_code, took = term.finish(timeout=10)
    output = bytes(term.output)
    assert exit_code == 0 and took < EXIT_WITHIN_S
    ours = re.sub(rb"\x1b\]22;[a-z-]*\x07", b"", output)  # Textual's own pointer-shape OSC
    for attack in (b"PWNED", b"UFdORUQ", b"\x1b]0;", b"\x1b]52", b"\x1bP", b"\xe2\x80\xae", b"\xe2\x81\xa6"):
        assert attack not in output, attack
    assert b"\x07" not in ours, "a bell (or an OSC it ends) reached the terminal"
    assert not re.search(rb"\xc2[\x80-\x9f]", output), "a C1 control reached the terminal"
    assert_terminal_restored(output)


def test_a_quit_that_lands_before_a_drain_exits_cleanly():
    """The race that made the quit tests above fail at random with exit 1 (MountError:
    "Can't mount widget(s) before Transcript… is mounted"): a turn's first event waits
    in the pump for its drain (the drain interval, or a quit's grace period, which holds
    the app's queue), the quit lands first, and the drain then runs in an exiting app,
    whose widgets Textual counts as detached. Here the drain is queued behind the exit
    on purpose: the app must exit with 0, not crash mounting the message."""
    import asyncio

    from tests.support.endless_app import EndlessChat
    from tests.support.pilot import wait_for
    from specchat.events import UserMessage
    from specchat.ui.app import DRAIN_INTERVAL_S, SpecchatApp
    from specchat.ui.backend import BackendInfo, LoadedBackend

    async def run() -> SpecchatApp:
        app = SpecchatApp("endless", loader=lambda ref, progress: LoadedBackend(EndlessChat(), BackendInfo("endless")))
        async with app.run_test(size=(110, 30)) as pilot:
            await wait_for(pilot, lambda: app.loaded is not None and app.loading is None, what="the backend")
            await pilot.pause(2 * DRAIN_INTERVAL_S)  # the next drain runs at once, not on a timer
            app.pump.put(UserMessage(1, "hello"))  # its drain is queued...
            app.exit()  # ...and runs after the exit began
            await pilot.pause()
        return app

    assert asyncio.run(run()).return_code == 0


# --- a hard exit: nothing in the process runs, the terminal is still given back --------

def tty_modes(fd: int) -> tuple[bool, bool]:
    """(canonical input, echo) of the pty, as the shell will find it."""
    lflag = termios.tcgetattr(fd)[3]
    return bool(lflag & termios.ICANON), bool(lflag & termios.ECHO)


@pytest.mark.parametrize("how", ["SIGABRT", "SIGKILL"])
def test_a_process_killed_under_the_app_still_gives_the_terminal_back(env, how):
    """SIGABRT is what llama.cpp's GGML_ASSERT ends in (abort()); SIGKILL what the OOM
    killer sends. Neither runs any Python, so Textual cannot restore the terminal; the
    watcher (specchat/ui/terminal_guard.py) does. Planted bug: run_to_exit without the
    guard leaves the alternate screen and mouse reporting on, and the tty raw."""
    from specchat.ui.terminal_guard import RESET

    app = f"ulimit -c 0; exec {sys.executable} {ENDLESS_APP} chat"  # no core file
    term = Terminal(["sh", "-c", app], env)
    before = tty_modes(term.master)
    term.wait_for(lambda: b"ready" in term.output, "the app")
    term.type(b"an endless reply, please\r")
    term.wait_for(lambda: steps_recorded(env) >= 2, "the reply to stream")
    assert tty_modes(term.master) == (False, False), "the app did not put the tty in raw mode"
    term.proc.send_signal(getattr(signal, how))
    term.proc.wait(timeout=10)
    deadline = time.monotonic() + 5
    while RESET not in term.output and time.monotonic() < deadline:
        time.sleep(0.05)
    assert_terminal_restored(bytes(term.output))
    assert tty_modes(term.master) == before == (True, True)
    term.finish(timeout=1)


def test_a_clean_quit_leaves_the_watcher_silent(env):
    """After Textual's own restore the shell owns the screen: a second reset (its
    "leave the alternate screen" moves the cursor back) must not follow."""
    from specchat.ui.terminal_guard import RESET

    term = Terminal([sys.executable, str(ENDLESS_APP), "chat"], env)
    term.wait_for(lambda: b"ready" in term.output, "the app")
    term.type(b"\x11")
    assert term.finish(timeout=10)[0] == 0
    time.sleep(0.3)
    assert RESET not in term.output


def test_ctrl_c_with_text_selected_copies_instead_of_quitting(env):
    """Ctrl+C quits only where nothing is selected: with the message box's text selected
    it copies it (OSC 52), as the help screen says."""
    import base64

    term = Terminal([sys.executable, str(ENDLESS_APP), "chat"], env)
    term.wait_for(lambda: b"ready" in term.output, "the app")
    term.type(b"hello")
    time.sleep(0.3)
    term.type(b"\x1b[1;2H")  # shift+home: select to the start of the line
    time.sleep(0.3)
    term.type(b"\x03")
    copied = b"\x1b]52;c;" + base64.b64encode(b"hello")
    term.wait_for(lambda: copied in term.output, "the copy")
    time.sleep(0.5)
    assert term.proc.poll() is None, "ctrl+c quit with text selected"
    term.type(b"\x11")
    assert term.finish(timeout=10)[0] == 0
