"""verify, doctor, bench, serve and plan send the model the same token ids for one profile
and one message, the profile's system prompt first (issue 58, item 1): verify and doctor
once checked prompts without it while bench, serve and plan added it. Each command's own
code builds the prompt on the tiny model; whatever would run the model is stubbed to hand
the ids back. Planted bug: verify's prompt without the system prompt fails it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specchat.verify.single import DEFAULT_PROMPT, DEFAULT_REPLY_START

SYSTEM = "You are a terse assistant."


class Sent(Exception):
    """Raised by a stub in place of running the model, carrying the prompt's ids."""

    def __init__(self, ids):
        super().__init__()
        self.ids = list(ids)


def sent(call) -> list[int]:
    with pytest.raises(Sent) as caught:
        call()
    return caught.value.ids


def hand_back(target, proposer, candidates, *args):
    """verify's _choose_prompt, stubbed: the first candidate's ids."""
    raise Sent(candidates[0][1])


def send_like(command: str, profile_path, profile, loaded, monkeypatch) -> list[int]:
    """The ids ``command`` would send for DEFAULT_PROMPT (doctor's and verify's with
    DEFAULT_REPLY_START after it, as they send it)."""
    def stop(ids, *args, **kwargs):
        raise Sent(ids)

    if command == "verify":
        import specchat.verify.single as single

        monkeypatch.setattr(single, "_choose_prompt", hand_back)
        return sent(lambda: single.choose_prompt(loaded, profile, loaded.target, None, None, 1, DEFAULT_PROMPT,
                                                 DEFAULT_REPLY_START, 1, 1, lambda *a: None))
    if command == "doctor":
        import specchat.doctor.smoke as smoke

        monkeypatch.setattr(smoke, "_decode", lambda engine, ids, params: stop(ids))
        return sent(lambda: smoke._compare(profile, loaded, 0.0))
    if command == "bench":
        from specchat.bench.prompt import Prompt, PromptSet
        from specchat.bench.runner import chat_requests

        one = PromptSet("one", "", 8, (Prompt("a", DEFAULT_PROMPT),), "")
        _, (request,) = chat_requests(loaded, profile, [one], 8)
        return list(request.ids)
    if command == "serve":
        import specchat.serve.service as service
        from specchat.serve.openai import Job

        for name in ("check_profile", "LaneProposers", "BatchedEngine", "BatchedServer"):
            monkeypatch.setattr(service, name, lambda *a, **k: None)
        job = Job("chat", None, 8, False, False, False, messages=({"role": "user", "content": DEFAULT_PROMPT},))
        return service.build_service(profile, loaded, 1).prompt_ids(job)
    import specchat.commands.plan as plan
    import specchat.plan as plan_core

    monkeypatch.setattr(plan, "DRAFT_PROMPT", DEFAULT_PROMPT)
    monkeypatch.setattr(plan_core, "measure_target", lambda *a, **k: ([object()], 0.0))
    monkeypatch.setattr(plan_core, "measure_drafting", lambda engine, prompt, *a, **k: stop(prompt))
    monkeypatch.setattr("specchat.loading.load_models", lambda profile: loaded)
    from specchat.cli import build_parser  # plan's options and the shared ones it declares (-p)

    return sent(lambda: plan.run(build_parser().parse_args(["plan", "-p", str(profile_path)])))


@pytest.fixture(scope="module")
def with_system(tiny_ngram_profile_path, tmp_path_factory):
    from specchat.config import load_profile
    from specchat.loading import load_models

    path = tmp_path_factory.mktemp("profiles") / "tiny-system.toml"
    path.write_text(tiny_ngram_profile_path.read_text() + f'\n[chat]\nsystem_prompt = "{SYSTEM}"\n')
    profile = load_profile(str(path))
    return path, profile, load_models(profile)


@pytest.mark.parametrize("command", ["verify", "doctor", "bench", "serve", "plan"])
def test_every_command_sends_the_profiles_system_prompt_and_the_message(with_system, command, monkeypatch):
    path, profile, loaded = with_system
    tokenizer = loaded.tokenizer
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": DEFAULT_PROMPT}]
    want = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
    if command in ("verify", "doctor"):
        want += list(tokenizer(DEFAULT_REPLY_START, add_special_tokens=False)["input_ids"])
    assert send_like(command, path, profile, loaded, monkeypatch) == want


def test_planted_verify_without_the_system_prompt_is_caught(with_system, monkeypatch):
    import specchat.verify.single as single
    from tests.support.mutations import mutant

    monkeypatch.setattr(single, "_choose_prompt", hand_back)  # the mutant keeps the globals it was made with
    bug = mutant(single.choose_prompt, [("ChatTemplate.of(profile, loaded.tokenizer)",
                                         "ChatTemplate(loaded.tokenizer, enable_thinking=profile.chat.enable_thinking)")])
    monkeypatch.setattr(single, "choose_prompt", bug)
    with pytest.raises(AssertionError):
        test_every_command_sends_the_profiles_system_prompt_and_the_message(with_system, "verify", monkeypatch)
