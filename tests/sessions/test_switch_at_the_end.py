"""A profile switch with no message after it is recorded, so ``--resume`` reopens the
chat on the profile it ended on (issue 59, item 8). Planted bug: the switch written only
with the next message or reset — a chat closed right after switching keeps the old header;
and --resume read the first header, not the last."""

from __future__ import annotations

from specchat.sessions.reader import read_recording
from specchat.sessions.recorder import Recorder, build_header
from specchat.sessions.recording_backend import RecordingBackend
from tests.sessions.test_recording_files import PROFILE, Chat


def test_a_switch_then_quit_is_recorded():
    recorder = Recorder.for_profile(PROFILE)
    recorder.start(build_header({"name": "tiny"}))
    first = RecordingBackend(Chat(), recorder)
    list(first.send("hello"))
    second = RecordingBackend(Chat(), recorder, takes_over=(first, build_header({"name": "ngram"})))
    first.close()  # the app closes the replaced backend, then the current one as it quits
    second.close()
    recording = read_recording(recorder.path)
    assert [h.event.profile["name"] for h in recording.later_headers] == ["ngram"]
    assert type(recording.events[-1].event).__name__ == "ProfileSwitched"
    assert recording.last_header.profile["name"] == "ngram"  # what --resume reopens the chat on (live.py)
