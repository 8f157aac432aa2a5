"""What keys a profile may contain, their types and allowed values: ``check_keys`` checks one
file's raw TOML (so an error names the file that holds the mistake), ``build_profile`` the merged
``extends`` chain and the rules that span keys.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ProfileError
from ..methods import METHODS, REMOTE_BACKENDS
from .model import (BACKENDS, DTYPES, GGUF_TYPES, MAX_SIBLINGS, MAX_SPECULATIVE_TOKENS, QUANTIZATIONS, ChatSpec,
                    ModelSpec, Profile, SamplingSpec, SpeculationSpec)


MAX_SEED = 2**64 - 1  # what a torch generator takes
# llama.cpp's n_ctx: it rounds a context up to a multiple of 256 anyway but clamps its
# batch to the value asked for, so a smaller one saves nothing and aborts the process
# (GGML_ASSERT) on the first prompt longer than it. 2**20 is the longest context models
# ship (Qwen2.5-1M); beyond it the KV cache alone is tens of GB, allocated before failing.
MIN_CTX = 256
MAX_CTX = 1 << 20


@dataclass(frozen=True)
class Key:
    types: tuple[type, ...]
    type_name: str
    choices: tuple[str, ...] = ()
    # returns a problem description, or None when the value is fine
    check: Callable[[Any], str | None] | None = None


def _at_least(low):
    return lambda v: None if v >= low else f"must be ≥ {low}"


def _finite_at_least(low):
    # TOML has inf and nan; a temperature of either would reach the sampler
    return lambda v: None if math.isfinite(v) and v >= low else f"must be ≥ {low} and finite"


def _between(low, high):
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def _n_ctx(v: int) -> str | None:
    ok = v == 0 or MIN_CTX <= v <= MAX_CTX
    return None if ok else f"must be 0 (the model's own) or between {MIN_CTX} and {MAX_CTX:,} tokens"


def _device(v: str) -> str | None:
    ok = v in ("auto", "cpu", "cuda", "mps") or (v.startswith("cuda:") and v[5:].isdigit())
    return None if ok else "must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'"


def _url(v: str) -> str | None:
    ok = v.startswith(("http://", "https://")) and len(v.split("://", 1)[1].strip("/")) > 0
    return None if ok else 'must be an http(s) URL such as "http://127.0.0.1:8080"'


def _env_name(v: str) -> str | None:
    ok = v and (v[0].isalpha() or v[0] == "_") and all(c.isalnum() or c == "_" for c in v)
    return None if ok else "must be the name of an environment variable (letters, digits, _), not the key itself"


def _store(v: str) -> str | None:
    word = v.strip().lower()
    if word in ("off", "auto") and v != word:  # not a file named "Off": the keyword, mistyped
        return f'must be "off", "auto" or the path of a store file; did you mean "{word}"? (a file named so: "./{v}")'
    if v.strip() and "\0" not in v:
        return None
    return 'must be "off", "auto" or the path of a store file'


def _gamma(v) -> str | None:
    if isinstance(v, str):
        return None if v == "auto" else f"must be an integer 1..{MAX_SPECULATIVE_TOKENS} or \"auto\""
    return _between(1, MAX_SPECULATIVE_TOKENS)(v)


_STR = ((str,), "a string")
_INT = ((int,), "an integer")
_NUM = ((int, float), "a number")
_BOOL = ((bool,), "true or false")

MODEL_KEYS = {
    "source": Key(*_STR),
    "revision": Key(*_STR),
    "gguf_file": Key(*_STR),
    "dtype": Key(*_STR, choices=DTYPES),
    "quantization": Key(*_STR, choices=QUANTIZATIONS),
    "device": Key(*_STR, check=_device),
    "num_layers": Key(*_INT, check=_at_least(1)),
    "backend": Key(*_STR, choices=BACKENDS),
    "n_gpu_layers": Key(*_INT, check=_at_least(-1)),
    "n_ctx": Key(*_INT, check=_n_ctx),
    "n_threads": Key(*_INT, check=_at_least(0)),
    "gguf_type": Key(*_STR, choices=GGUF_TYPES),
    "url": Key(*_STR, check=_url),
    "api_key_env": Key(*_STR, check=_env_name),
}
SPECULATION_KEYS = {
    "method": Key(*_STR, choices=tuple(METHODS)),
    "draft": "table",
    "num_speculative_tokens": Key((int, str), 'an integer or "auto"', check=_gamma),
    "max_speculative_tokens": Key(*_INT, check=_between(1, MAX_SPECULATIVE_TOKENS)),
    "prompt_lookup_min": Key(*_INT, check=_at_least(1)),
    "prompt_lookup_max": Key(*_INT, check=_at_least(1)),
    "head": Key(*_STR),
    "head_revision": Key(*_STR),
    "siblings": Key(*_INT, check=_between(1, MAX_SIBLINGS)),
    "tree": Key(*_STR, choices=("first", "dynamic")),
    "suffix_store": Key(*_STR, check=_store),
}
SAMPLING_KEYS = {
    "temperature": Key(*_NUM, check=_finite_at_least(0)),
    "top_p": Key(*_NUM, check=lambda v: None if 0 < v <= 1 else "must be > 0 and ≤ 1"),
    "top_k": Key(*_INT, check=_at_least(0)),
    "seed": Key(*_INT, check=_between(0, MAX_SEED)),
    "max_new_tokens": Key(*_INT, check=_at_least(1)),
}
CHAT_KEYS = {"system_prompt": Key(*_STR), "enable_thinking": Key(*_BOOL),
             "overflow": Key(*_STR, choices=("rolling", "stop"))}
TOP_KEYS = {
    "description": Key(*_STR),
    "extends": Key(*_STR),
    "record": Key(*_BOOL),
    "trust_remote_code": Key(*_BOOL),
    "needs_gpu": Key(*_BOOL),
    "target": "table",
    "speculation": "table",
    "sampling": "table",
    "chat": "table",
}
TABLES = {
    ("target",): MODEL_KEYS,
    ("speculation",): SPECULATION_KEYS,
    ("speculation", "draft"): MODEL_KEYS,
    ("sampling",): SAMPLING_KEYS,
    ("chat",): CHAT_KEYS,
}


def did_you_mean(word: str, options) -> str | None:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else None


def check_keys(raw: dict, file: Path, line_of: Callable[[tuple[str, ...]], int | None]) -> None:
    """Raise ProfileError for the first unknown key, wrong type or bad value in one file."""
    _check_table(raw, (), TOP_KEYS, file, line_of)


def _check_table(table: dict, where: tuple[str, ...], spec: dict, file: Path, line_of) -> None:
    for key, value in table.items():
        path = where + (key,)
        dotted = ".".join(path)
        rule = spec.get(key)
        if rule is None:
            hint = did_you_mean(key, spec) or "valid keys here: " + ", ".join(spec)
            raise ProfileError(f"key '{dotted}' is unknown", file=file, key=dotted, hint=hint, line=line_of(path))
        if rule == "table":
            if not isinstance(value, dict):
                raise ProfileError(f"'{dotted}' must be a table", file=file, key=dotted,
                                   hint=f"write it as a [{dotted}] section", line=line_of(path))
            _check_table(value, path, TABLES[path], file, line_of)
            continue
        _check_value(value, rule, dotted, file, line_of(path))


def _check_value(value, rule: Key, dotted: str, file: Path, line: int | None) -> None:
    if isinstance(value, bool) and bool not in rule.types or not isinstance(value, rule.types):
        raise ProfileError(f"key '{dotted}' must be {rule.type_name}, not {_describe(value)}", file=file,
                           key=dotted, hint=_type_hint(rule), line=line)
    if rule.choices and value not in rule.choices:
        options = ", ".join(f"'{c}'" for c in rule.choices)
        hint = did_you_mean(value, rule.choices) or f"use one of {options}"
        raise ProfileError(f"key '{dotted}' has bad value {_quoted(value)}", file=file, key=dotted, hint=hint, line=line)
    problem = rule.check(value) if rule.check else None
    if problem:
        raise ProfileError(f"key '{dotted}' has bad value {_quoted(value)}", file=file, key=dotted, line=line,
                           hint=f"it {problem}")


def value_problem(dotted: str, value: Any) -> str | None:
    """What is wrong with ``value`` for the profile key ``dotted`` (e.g.
    ``"sampling.seed"``), or None: the one rule for the command-line flags, the demo's
    directives and the UI that override a profile's keys."""
    table, _, key = dotted.rpartition(".")
    rule = TABLES[tuple(table.split("."))][key]
    if isinstance(value, bool) and bool not in rule.types or not isinstance(value, rule.types):
        return f"must be {rule.type_name}"
    if rule.choices and value not in rule.choices:
        return "must be one of " + ", ".join(f"'{c}'" for c in rule.choices)
    return rule.check(value) if rule.check else None


def _describe(value) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             dict: "a table", list: "an array"}
    return f"{names.get(type(value), type(value).__name__)} ({_quoted(value)})"


def _quoted(value, limit: int = 60) -> str:
    """A value as a message quotes it: TOML's true/false, and at most ``limit`` characters
    (a table nested 300 deep, or a 4,000-digit number, stays one short line)."""
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _type_hint(rule: Key) -> str:
    if rule.types == (str,):
        return 'put the value in quotes, e.g. "…"'
    if rule.types == (bool,):
        return "write true or false without quotes"
    return "write a number without quotes" if str not in rule.types else 'write a number or "auto"'


def build_profile(name: str, merged: dict, file: Path, line_of) -> Profile:
    """Turn merged, key-checked tables into a Profile; check rules spanning keys."""
    def err(message, key, hint):
        return ProfileError(message, file=file, key=key, hint=hint, line=line_of(tuple(key.split("."))))

    target_raw = merged.get("target", {})
    if "source" not in target_raw and target_raw.get("backend") not in REMOTE_BACKENDS:
        raise ProfileError("key 'target.source' is missing", file=file, key="target.source",
                           hint='add [target] source = "embedded:smollm2-135m-instruct" (or a Hub id / local dir), '
                                'or extends = "default"')
    spec_raw = dict(merged.get("speculation", {}))
    draft_raw = spec_raw.pop("draft", None)
    speculation = SpeculationSpec(**spec_raw)
    method = METHODS[speculation.method]
    if method.needs == "draft":
        target_source = str(target_raw.get("source", ""))
        if target_source.startswith("ollama:") and not (draft_raw and "source" in draft_raw):
            # an Ollama model whose manifest carries a draft layer brings its draft along
            draft_raw = {"backend": target_raw.get("backend", "llama.cpp"), **(draft_raw or {}),
                         "source": "ollama-draft:" + target_source.removeprefix("ollama:")}
        if not draft_raw or "source" not in draft_raw:
            raise err(f"method '{method.name}' needs a draft model", "speculation.draft.source",
                      'add [speculation.draft] source = "…", or set method = "ngram"')
        draft = _model(draft_raw, "speculation.draft", err)
    else:
        draft = None  # an inherited draft is not loaded for ngram/none
    if isinstance(spec_raw.get("num_speculative_tokens"), int) and "max_speculative_tokens" not in spec_raw:
        # a fixed γ above the default ceiling raises the ceiling rather than failing
        spec_raw["max_speculative_tokens"] = max(speculation.max_speculative_tokens, spec_raw["num_speculative_tokens"])
    speculation = SpeculationSpec(**{**spec_raw, "draft": draft})
    if speculation.prompt_lookup_min > speculation.prompt_lookup_max:
        raise err(f"prompt_lookup_min ({speculation.prompt_lookup_min}) is larger than prompt_lookup_max "
                  f"({speculation.prompt_lookup_max})", "speculation.prompt_lookup_min",
                  "make prompt_lookup_min ≤ prompt_lookup_max")
    if method.head and not speculation.head:
        raise err(f"method '{method.name}' needs a head", "speculation.head",
                  'add head = "embedded:smollm2-135m-instruct-eagle3" (or a folder, or a Hub id such as '
                  '"AngelSlim/Qwen3-8B_eagle3"); `specchat train-head` trains one' if method.needs == "eagle3" else
                  f'add head = "<folder>" holding a {"Medusa-1 " if method.needs == "medusa" else ""}head\'s '
                  'config.json and safetensors weights (or a Hub id org/name)')
    if method.head and target_raw.get("backend") in REMOTE_BACKENDS:
        llama_server = "llama-server -md head.gguf --spec-type draft-eagle3; " if method.needs == "eagle3" else ""
        raise err(f"method '{method.name}' runs the head here, beside a local target, not a '{target_raw['backend']}' server",
                  "speculation.method", f"give the server the head itself ({llama_server}vLLM --speculative-config "
                  f"'{{\"method\": \"{method.needs}\", …}}')")  # vLLM names head kinds as we do
    gamma = speculation.num_speculative_tokens
    if isinstance(gamma, int) and gamma > speculation.max_speculative_tokens:
        raise err(f"num_speculative_tokens ({gamma}) exceeds max_speculative_tokens "
                  f"({speculation.max_speculative_tokens})", "speculation.num_speculative_tokens",
                  "lower num_speculative_tokens or raise max_speculative_tokens")
    # bitsandbytes quantization is checked by the loader (it depends on the device)
    return Profile(name, merged.get("description", ""), file, _model(target_raw, "target", err), speculation,
                   SamplingSpec(**merged.get("sampling", {})), ChatSpec(**merged.get("chat", {})),
                   record=merged.get("record", True), trust_remote_code=merged.get("trust_remote_code", False),
                   needs_gpu=merged.get("needs_gpu", False))


def _model(raw: dict, where: str, err) -> ModelSpec:
    spec = ModelSpec(**raw)
    remote = spec.backend in REMOTE_BACKENDS
    if remote and where != "target":
        raise err(f"backend '{spec.backend}' can serve only the target", f"{where}.backend",
                  "the server drafts for itself: start it with its own draft model or n-gram speculation")
    if remote and not spec.url:
        raise err(f"backend '{spec.backend}' needs the server's url", f"{where}.url",
                  'add url = "http://127.0.0.1:8080" (where the server listens)')
    if not remote and (spec.url or spec.api_key_env):
        key = "url" if spec.url else "api_key_env"
        raise err(f"key '{where}.{key}' applies only to a server backend", f"{where}.{key}",
                  'set backend = "llama-server" or "vllm", or remove the key')
    if remote:
        for key, default in (("quantization", "none"), ("num_layers", None), ("n_gpu_layers", 0), ("n_ctx", 0),
                             ("n_threads", 0), ("gguf_file", None)):
            if getattr(spec, key) != default:
                raise err(f"key '{where}.{key}' does not apply to backend '{spec.backend}'", f"{where}.{key}",
                          "the server's command line sets it: remove the key")
    # Keys of the other backend are ignored rather than refused: a profile that extends
    # one of another backend could not unset them (TOML has no null). Quantisation is the
    # exception — a GGUF carries its own, and asking for another is a real mistake.
    if spec.backend == "llama.cpp" and spec.quantization != "none":
        raise err(f"key '{where}.quantization' does not apply to backend 'llama.cpp'", f"{where}.quantization",
                  'a GGUF file carries its own quantisation (see gguf_type): set quantization = "none", '
                  'or use backend = "transformers"')
    return spec
