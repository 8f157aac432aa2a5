"""Issue 43's long-chat check: 12 turns of 300-token replies on the default profile in a
2,048-token context, under ``[chat] overflow = "rolling"`` (the default).

    .venv/bin/python docs/benchmarks/rolling_chat.py

Run 2026-12-03 (AMD EPYC, AVX2, 2 cores; 104 s): every turn ran to its 300 tokens
("length"). Turns 1-6 fit (prompts of 33 → 1,627 tokens); from turn 7 on the prompt stays
at ~1,625 tokens and the turn's note says how many early turns the model no longer sees
("the model no longer sees the first 1 turn of this chat, …" up to 6 at turn 12); the
history keeps all 24 messages. The system prompt is never dropped (tests/engine/
test_rolling_window.py, which also covers "stop").
"""

import sys
import tempfile
import time
from pathlib import Path

from specchat.config import load_profile
from specchat.engine.factory import build_chat
from specchat.events import ErrorEvent, StepEvent, TurnFinished, TurnStarted
from specchat.loading import load_models

PROFILE = '''extends = "default"
[target]
n_ctx = 2048
[sampling]
max_new_tokens = 300
[chat]
system_prompt = "You are a helpful assistant. Answer at length."
overflow = "rolling"
'''
TOPICS = ["the history of Rome", "how a CPU cache works", "photosynthesis", "the French revolution",
          "sorting algorithms", "the water cycle", "how vaccines work", "the stock market", "black holes",
          "the printing press", "neural networks", "plate tectonics"]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rolling.toml"
        path.write_text(PROFILE)
        profile = load_profile(str(path))
        chat = build_chat(profile, load_models(profile))
    start = time.time()
    for i, topic in enumerate(TOPICS, 1):
        tokens, note, finish, prompt = 0, "", None, 0
        for event in chat.send(f"Tell me everything about {topic}."):
            if isinstance(event, TurnStarted):
                note, prompt = event.note, event.prompt_tokens
            elif isinstance(event, StepEvent):
                tokens += len(event.step.tokens)
            elif isinstance(event, TurnFinished):
                finish = event.finish_reason
            elif isinstance(event, ErrorEvent):
                print(f"error: {event}")
                return 1
        print(f"turn {i}: prompt {prompt} tokens, reply {tokens} tokens, finish {finish}, note: {note!r}", flush=True)
    print(f"history {len(chat.history)} messages, {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
