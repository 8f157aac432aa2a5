"""``replay --simulate`` (bench/simulate.py): a recorded greedy chat, re-drafted without the
model, accepts exactly what the live chat accepted, step for step."""

from __future__ import annotations

import re

import pytest

import specchat.bench.simulate as simulate_module
from specchat.bench.simulate import simulate
from specchat.config.model import SpeculationSpec
from specchat.engine.engine import SpeculativeEngine
from specchat.engine.proposers import NgramProposer
from specchat.engine.sampling import SamplingParams
from specchat.engine.session import ChatSession
from specchat.errors import SpecchatError
from specchat.events import StepEvent, TurnFinished, TurnStarted
from specchat.loading.gguf_tokenizer import GgufTokenizer
from specchat.sessions.reader import read_recording
from specchat.sessions.recorder import Recorder, build_header
from tests.support.cli import in_process
from tests.support.mutations import mutant, patched
from tests.support.needs import embedded_llama_backend, needs_llama_cpp

pytestmark = needs_llama_cpp

TURNS = ("Write a Python function that adds two numbers.", "Hi! Reply with one word.",
         "Repeat the last function exactly.")
# The first turn ends for its length (no such function fits 16 tokens), a later one on EOS within 96 (a
# one-word reply): both kinds of end are simulated whatever the CPU's rounding (at one bound of 48 for
# all, the greedy replies ended on EOS on AVX2 and for their length on AVX-512). A reply that ended for
# its length bounds its own simulation; the others are bounded by MAX_NEW, as live.
FIRST, MAX_NEW = 16, 96


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """Three greedy turns of n-gram lookup at γ = 3 through the real turn loop, recorded."""
    backend = embedded_llama_backend(max_ctx=2048)
    chat = ChatSession(SpeculativeEngine(backend, NgramProposer(3, 1, 3)), GgufTokenizer(backend.llm),
                       sampling=SamplingParams(temperature=0.0), max_new_tokens=MAX_NEW)
    path = tmp_path_factory.mktemp("sim") / "chat.jsonl"
    with Recorder(path) as rec:
        rec.start(build_header({"name": "live", "speculation": {"method": "ngram", "num_speculative_tokens": 3},
                                "sampling": {"temperature": 0.0, "max_new_tokens": MAX_NEW}}))
        for i, text in enumerate(TURNS):
            chat.max_new_tokens = FIRST if i == 0 else MAX_NEW
            for event in chat.send(text):
                rec.record(event)
    return read_recording(path)


def lived(recording):
    return [[e.event.step.stats for e in recording.events if isinstance(e.event, StepEvent) and e.event.turn == t]
            for t in range(1, len(TURNS) + 1)]


def counts(per_turn):
    return [[(s.num_speculative_tokens, s.num_draft_tokens, s.num_accepted_tokens) for s in steps]
            for steps in per_turn]


def live_counts(recording):
    """The live steps' (γ, drafts, kept). A step whose reply ended on a drafted EOS counts as
    kept the drafts the target judged after it too (its argmax after EOS: the chat template
    goes on, and so does n-gram lookup); no recording holds that argmax, so of that step only
    the drafts up to the EOS are compared: its tokens (bench/simulate.py's docstring)."""
    out = counts(lived(recording))
    for turn, steps in enumerate(out, 1):
        last = [e.event for e in recording.events if isinstance(e.event, StepEvent) and e.event.turn == turn][-1]
        if last.step.finish_reason == "eos" and last.step.tokens[-1].kind == "accepted":
            gamma, k, n = steps[-1]
            steps[-1] = (gamma, k, min(n, len(last.step.tokens)))
    return out


def simulated(recording, gamma=3):
    per_turn, _ = simulate([e.event for e in recording.events], SpeculationSpec(), "ngram", gamma, MAX_NEW)
    return per_turn


def test_the_simulation_accepts_what_the_live_chat_accepted_step_for_step(recording):
    live = lived(recording)
    started = [e.event for e in recording.events if isinstance(e.event, TurnStarted)]
    assert all(len(t.prompt_ids) == t.prompt_tokens > 0 for t in started)  # the prompts as the model saw them
    assert sum(s.num_accepted_tokens for steps in live for s in steps) > 0  # drafts were kept: a real test
    finishes = [e.event.finish_reason for e in recording.events if isinstance(e.event, TurnFinished)]
    assert "length" in finishes and "eos" in finishes
    assert counts(simulated(recording)) == live_counts(recording)


def test_a_target_read_one_position_early_is_caught(recording):
    early = mutant(simulate_module._Recorded.forward, [("self.text[position + 1] if", "self.text[position] if")])
    with patched(simulate_module._Recorded, "forward", early):
        assert counts(simulated(recording)) != live_counts(recording)


def test_another_gamma_is_simulated_too_and_differs(recording):
    other = simulated(recording, gamma=5)
    assert max(s.num_draft_tokens for steps in other for s in steps) > 3
    assert sum(len(steps) for steps in other) != sum(len(steps) for steps in lived(recording))


def test_the_command_prints_simulated_and_recorded_figures(recording):
    result = in_process("replay", str(recording.path), "--simulate")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    simulated_line, predicted = next(line for line in lines if line.startswith("simulated: mean")).split("; ")
    recorded_line = next(line for line in lines if line.startswith("recorded (ngram, γ = 3)"))
    # the same steps (the kept drafts past the last turn's EOS are the recording's alone: live_counts)
    assert simulated_line.rsplit(" in ", 1)[1] == recorded_line.rsplit(" in ", 1)[1]
    assert predicted.startswith("predicted ") and "× over plain decoding" in predicted


def test_both_model_free_proposers_in_one_call_each_with_its_prediction(recording):
    result = in_process("replay", str(recording.path), "--simulate", "--method", "ngram,suffix")
    assert result.returncode == 0, result.stderr
    heads = [line.split(",")[0] for line in result.stdout.splitlines() if line.startswith("simulated: ")]
    assert heads == ["simulated: ngram", "simulated: mean acceptance length " + heads[1].split("length ")[1],
                     "simulated: suffix", "simulated: mean acceptance length " + heads[3].split("length ")[1]]
    assert sum("× over plain decoding" in line for line in result.stdout.splitlines()) == 2


def test_the_prediction_is_the_cost_models_over_the_simulated_steps():
    from specchat.commands.simulate import predicted_gain
    from specchat.events import StepStats

    # plain steps 10 ms, a step verifying k drafts 10 + 2k ms, all at one context
    timed = [StepStats(0, 0, 0, total_ms=10.0)] * 3 + [StepStats(k, k, 0, total_ms=10.0 + 2 * k) for k in (1, 3)]
    simulated = [StepStats(0, 0, 0, prefill_tokens=9), StepStats(3, 3, 2), StepStats(0, 0, 0), StepStats(2, 2, 2)]
    # 3 + 1 + 3 tokens over 1.6 + 1 + 1.4 plain steps (k = 2 on the line through k = 1 and 3)
    assert predicted_gain(timed, simulated) == pytest.approx(7 / 4.0)
    assert predicted_gain(timed[:3], simulated) is None  # no drafting step was timed


def test_a_model_method_or_a_bad_gamma_is_one_line(recording):
    for args in (("--method", "draft_model"), ("--method", "ngram,eagle3"), ("--gamma", "0"), ("--gamma", "x")):
        result = in_process("replay", str(recording.path), "--simulate", *args)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_recording_without_prompt_ids_says_so(recording):
    events = [TurnStarted(e.turn, e.prompt_tokens, 3) if isinstance(e, TurnStarted) else e
              for e in (t.event for t in recording.events)]
    with pytest.raises(SpecchatError, match="no prompt ids"):
        simulate(events, SpeculationSpec(), "ngram", 3)


@pytest.mark.parametrize("ids, why", [([1, -2], "between 0 and"), ([1], "must hold prompt_tokens ids"),
                                      (["a", 1], "must be an integer")])
def test_recorded_prompt_ids_are_checked_like_every_field(ids, why):
    from specchat.sessions.validate import FieldError, check_record

    check_record({"type": "TurnStarted", "turn": 1, "prompt_tokens": 2, "prompt_ids": [5, 6]})
    with pytest.raises(FieldError, match=why):
        check_record({"type": "TurnStarted", "turn": 1, "prompt_tokens": 2, "prompt_ids": ids})


def test_the_stand_in_target_is_as_wide_as_the_tokens_the_chat_used(recording, monkeypatch):
    """Ids are renumbered: the same chat with every id moved up by a million simulates the
    same steps over logits as wide as its distinct tokens (a crafted id of 2^31 − 1 asked
    for 8.6 GB a row before)."""
    import dataclasses

    def moved(event):
        if isinstance(event, TurnStarted):
            return dataclasses.replace(event, prompt_ids=tuple(i + 10**6 for i in event.prompt_ids))
        if isinstance(event, StepEvent):
            tokens = tuple(dataclasses.replace(t, id=t.id + 10**6) for t in event.step.tokens)
            return dataclasses.replace(event, step=dataclasses.replace(event.step, tokens=tokens))
        return event

    widths, init = [], simulate_module._Recorded.__init__
    monkeypatch.setattr(simulate_module._Recorded, "__init__", lambda self, n: (widths.append(n), init(self, n))[1])
    events = [moved(t.event) for t in recording.events]
    per_turn, _ = simulate(events, SpeculationSpec(), "ngram", 3, MAX_NEW)
    used = {i for e in events if isinstance(e, TurnStarted) for i in e.prompt_ids}
    used |= {t.id for e in events if isinstance(e, StepEvent) for t in e.step.tokens}
    assert counts(per_turn) == live_counts(recording) and widths == [len(used) + 1]


@pytest.mark.parametrize("token, why", [({"id": -7}, "'step.tokens[0].id' must be a token id"),
                                        ({"id": 2**40}, "between 0 and 2^31"),
                                        ({"id": 5, "rejected_id": -2}, "'step.tokens[0].rejected_id'")])
def test_recorded_token_ids_are_checked_like_every_field(token, why):
    from specchat.sessions.validate import FieldError, check_record

    def step(**fields):
        return {"type": "StepEvent", "turn": 1, "t": 0.1,
                "step": {"tokens": [{"kind": "target", "p": 0.5, "text": "a", **fields}],
                         "stats": {"num_speculative_tokens": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}}}

    check_record(step(id=5))
    check_record(step(id=-1))  # a server's token, whose id it did not say
    with pytest.raises(FieldError, match=re.escape(why)):
        check_record(step(**token))


def test_a_damaged_recording_is_simulated_up_to_the_damage_and_says_so(recording, tmp_path):
    cut = tmp_path / "cut.jsonl"
    cut.write_text(recording.path.read_text() + '{"type": "NoSuchEvent", "ts": 9e9}\n')
    result = in_process("replay", str(cut), "--simulate")
    assert result.returncode == 1 and "simulated: ngram" in result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert "simulated up to the damage" in line and "cut.jsonl" in line and "unknown event type" in line
