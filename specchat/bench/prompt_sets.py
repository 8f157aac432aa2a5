"""Prompt sets for ``specchat bench``: the shipped ones by name, or TOML / JSON-lines files.
A file is untrusted: the names bench prints (set, ids, description) are cleaned here."""

from __future__ import annotations

from pathlib import Path

from specchat import untrusted
from specchat.bench.prompt import DEFAULT_MAX_NEW_TOKENS, PROMPTS_DIR, Prompt, PromptSet
from specchat.errors import SpecchatError
from specchat.sanitize import clean_line

SHIPPED_SETS = ("repetitive", "open", "unusual", "long")


def load_prompt_sets(specs: list[str]) -> list[PromptSet]:
    """Each spec a shipped set, ``all``, ``spec-bench…``, ``humaneval…`` or a .toml / .jsonl file."""
    from specchat.bench.humaneval import humaneval_set, is_humaneval
    from specchat.bench.spec_bench import is_spec_bench, spec_bench_sets

    sets: list[PromptSet] = []
    for spec in specs:
        if is_spec_bench(spec):
            found = spec_bench_sets(spec)
        elif is_humaneval(spec):
            found = [humaneval_set(spec)]
        else:
            found = [load_prompt_set(name) for name in (SHIPPED_SETS if spec == "all" else (spec,))]
        for prompt_set in found:
            if any(s.name == prompt_set.name for s in sets):
                raise SpecchatError(f"prompt set '{prompt_set.name}' is given twice", key="--prompts")
            sets.append(prompt_set)
    return sets


def load_prompt_set(spec: str) -> PromptSet:
    path = Path(spec).expanduser()
    if spec in SHIPPED_SETS:
        path = PROMPTS_DIR / f"{spec}.toml"
    elif not path.is_file():
        raise SpecchatError(f"--prompts {spec!r} is neither a shipped set nor a file", key="--prompts",
                            hint=f"use one of {', '.join(SHIPPED_SETS)}, all, spec-bench[:N], spec-bench/CATEGORY[:N], humaneval[:N], "
                                 "or a path to a .toml or .jsonl file")
    if path.suffix == ".toml":
        return _from_toml(path)
    if path.suffix in (".jsonl", ".json"):
        return _from_jsonl(path)
    raise SpecchatError(f"prompt file {path} has an unknown extension", file=str(path),
                        hint="use .toml ([[prompts]] id/text) or .jsonl (one {\"prompt\": ...} per line)")


def _utf8(path: Path) -> str:
    try:
        return untrusted.read_text(path)
    except untrusted.Unreadable as error:
        raise SpecchatError(f"cannot read prompt set: {error}", file=str(path),
                            hint="save the file as UTF-8") from None
    except OSError as error:
        raise SpecchatError(f"cannot read prompt set: {error.strerror or error}", file=str(path)) from None


def _from_toml(path: Path) -> PromptSet:
    try:
        data = untrusted.toml(_utf8(path))
    except untrusted.TooDeep:
        raise SpecchatError("cannot read prompt set: TOML nested too deeply", file=str(path)) from None
    except untrusted.Unreadable as error:
        raise SpecchatError(f"cannot read prompt set: {error}", file=str(path)) from None
    items = data.get("prompts")
    if not isinstance(items, list) or not items:
        raise SpecchatError("no [[prompts]] entries", file=str(path), key="prompts",
                            hint='add [[prompts]] tables with id = "..." and text = "..."')
    prompts = []
    for i, item in enumerate(items):
        text = item.get("text") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise SpecchatError(f"prompt {i + 1} has no text", file=str(path), key=f"prompts[{i}].text")
        prompts.append(Prompt(clean_line(item.get("id", f"{path.stem}-{i + 1}")), text))
    max_new = data.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if not isinstance(max_new, int) or max_new < 1:
        raise SpecchatError(f"max_new_tokens = {max_new!r} is not a positive integer", file=str(path),
                            key="max_new_tokens")
    return PromptSet(clean_line(path.stem), clean_line(data.get("description", "")), max_new, _unique(prompts, path),
                     str(path))


def _from_jsonl(path: Path) -> PromptSet:
    prompts = []
    for number, line in enumerate(_utf8(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = untrusted.json_value(line)
        except untrusted.Unreadable as error:
            raise SpecchatError(f"line {number} is not JSON: {error.reason}", file=str(path)) from None
        text = item.get("prompt", item.get("text")) if isinstance(item, dict) else item
        if isinstance(text, str) and not text.strip():
            raise SpecchatError(f"line {number}'s prompt is empty", file=str(path), hint="give it some text, or drop the line")
        if not isinstance(text, str):
            raise SpecchatError(f"line {number} has no \"prompt\" string", file=str(path))
        prompts.append(Prompt(clean_line(item.get("id", f"{path.stem}-{number}")) if isinstance(item, dict)
                              else clean_line(f"{path.stem}-{number}"), text))
    if not prompts:
        raise SpecchatError("the file holds no prompts", file=str(path))
    return PromptSet(clean_line(path.stem), "", DEFAULT_MAX_NEW_TOKENS, _unique(prompts, path), str(path))


def _unique(prompts: list[Prompt], path: Path) -> tuple[Prompt, ...]:
    """``prompts``, whose ids must differ: bench pairs each run with its plain twin by
    (set, id, repeat), so two prompts of one id would be paired with each other's rows."""
    seen: set[str] = set()
    for prompt in prompts:
        if prompt.id in seen:
            raise SpecchatError(f"prompt id {prompt.id!r} is given twice", file=str(path), key="id",
                                hint="give each prompt an id of its own")
        seen.add(prompt.id)
    return tuple(prompts)
