"""Chat templates come with model files, so they are untrusted code: a hostile one (a
loop of 10¹⁰ iterations, a 30 MB render, a string doubled forty times) stops within
about a second with one TemplateBudgetError line, instead of hanging ``run`` and the
TUI's Esc. Planted bugs: no trace on the template's lines (the loops run on: the
time cases never end), or no size checks on operators, calls and filters (each size
case either takes seconds to allocate a gigabyte, or is stopped by the clock instead)."""

from __future__ import annotations

import time

import pytest

from specchat.loading.chat_template import RENDER_SECONDS, Budget, BudgetedSandbox, TemplateBudgetError, render
from tests.support.needs import needs_llama_cpp

MESSAGES = [{"role": "user", "content": "hi"}]

# name → (template, which budget it runs out of)
HOSTILE = {
    "loop of 10^10": ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "time"),
    "loop of 10^10 calling nothing": ("{% set r = range(100000)|list %}{% for a in r %}{% for b in r %}"
                                      "{{ '' }}{% endfor %}{% endfor %}", "time"),
    "30 MB by a loop": ("{% for i in range(100000) %}{{ 'x' * 300 }}{% endfor %}", "size"),
    "30 MB at once": ("{{ 'x' * 30000000 }}", "size"),
    "10 GB at once": ("{{ 'x' * 10**10 }}", "size"),
    "a list of 10^10": ("{{ (range(100000)|list) * 100000 }}", "size"),
    "a method's width": ("{{ 'x'.center(10**9) }}", "size"),
    "a filter's width": ("{{ 'a\nb'|indent(10**9) }}", "size"),
    "a % format's width": ("{{ '%0999999999d' % 1 }}", "size"),
    "a str.format width": ("{{ '{:>999999999}'.format(1) }}", "size"),
    "doubling with ~": ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}{{ ns.s|length }}", "size"),
    "doubling by a macro": ("{% macro d(s, n) %}{{ d(s ~ s, n - 1) if n else s|length }}{% endmacro %}{{ d('x', 40) }}",
                            "size"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_template_stops_within_about_a_second_in_one_line(name):
    source, budget = HOSTILE[name]
    template = BudgetedSandbox().from_string(source)
    started = time.monotonic()
    with pytest.raises(TemplateBudgetError) as info:
        render(template, Budget(), messages=MESSAGES)
    took = time.monotonic() - started
    assert took < RENDER_SECONDS + 0.5, f"{name}: stopped after {took:.2f} s"
    text = str(info.value)
    assert "\n" not in text and ("ran for more than" if budget == "time" else "renders more than") in text


def test_an_ordinary_template_renders_as_jinja_renders_it():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    source = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
              "{{ '%-5s|' % 'ab' }}{{ '{:>4}'.format(7) }}{{ 'x'|center(9) }}")
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    budgeted = BudgetedSandbox().from_string(source)
    context = dict(messages=MESSAGES * 50, add_generation_prompt=True)
    assert render(budgeted, Budget(), **context) == plain.render(**context)


@needs_llama_cpp
def test_a_gguf_files_hostile_template_fails_the_prompt_not_the_process():
    """The real embedded model's tokenizer with its template replaced, as a crafted GGUF
    file would carry it; its own template renders as before."""
    from specchat.engine.backends.llamacpp import LlamaCppBackend
    from specchat.loading.embedded import find_gguf
    from specchat.loading.gguf_tokenizer import GgufTokenizer

    if find_gguf() is None:
        pytest.skip("the embedded model is not installed")
    tokenizer = GgufTokenizer(LlamaCppBackend(find_gguf(), n_threads=1, max_ctx=512).llm)
    assert "hi" in tokenizer.apply_chat_template(MESSAGES, tokenize=False)
    tokenizer.chat_template = HOSTILE["loop of 10^10"][0]
    del tokenizer._template  # the cached compiled template
    started = time.monotonic()
    with pytest.raises(TemplateBudgetError):
        tokenizer.apply_chat_template(MESSAGES)
    assert time.monotonic() - started < RENDER_SECONDS + 0.5


def test_a_hub_tokenizers_template_renders_as_before_and_stops_on_the_clock(tiny_profile_path):
    """A transformers tokenizer as load_models gives it (the tiny ChatML model): its own
    template gives the ids transformers gives; a runaway loop in place of it stops within
    about a second. Planted bug: load_tokenizer returning the tokenizer unwrapped (the
    loop runs on: ~10^10 iterations)."""
    from specchat.config import load_profile
    from specchat.loading import load_models

    tokenizer = load_models(load_profile(str(tiny_profile_path))).tokenizer
    plain = type(tokenizer).apply_chat_template

    def ids(out):  # a list, or transformers 5's BatchEncoding (the engine reads either)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    for thinking in ({}, {"enable_thinking": False}):
        expected = ids(plain(tokenizer, MESSAGES, add_generation_prompt=True, tokenize=True, **thinking))
        assert ids(tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, **thinking)) == expected
    tokenizer.chat_template = HOSTILE["loop of 10^10 calling nothing"][0]
    started = time.monotonic()
    with pytest.raises(TemplateBudgetError):
        tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    assert time.monotonic() - started < RENDER_SECONDS + 0.5
