"""Spec-Bench (Xia et al. 2024, arXiv 2401.07851) as six bench prompt sets:
``--prompts spec-bench[/CATEGORY][:N]``. The selection rule: docs/design/bench.md"""

from __future__ import annotations

import re
from pathlib import Path

from specchat import untrusted
from specchat.bench.prompt import DEFAULT_MAX_NEW_TOKENS, PROMPTS_DIR, Prompt, PromptSet
from specchat.errors import SpecchatError

NAME = "spec-bench"
QUESTIONS = PROMPTS_DIR / NAME / "question.jsonl"
PER_CATEGORY = 80  # every category holds 80 questions: the largest N
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
CATEGORIES = {  # set suffix → (Spec-Bench categories, description)
    "mt-bench": (MT_BENCH, "multi-turn conversation (MT-bench, 8 sub-categories; turn 2 reported as …/turn-2)"),
    "translation": (("translation",), "translation (German to English)"),
    "summarization": (("summarization",), "summarization (news articles)"),
    "qa": (("qa",), "question answering (short factual questions)"),
    "math_reasoning": (("math_reasoning",), "math reasoning (word problems)"),
    "rag": (("rag",), "retrieval-augmented generation (passages and a question)"),
}


def is_spec_bench(spec: str) -> bool:
    return spec == NAME or spec.startswith((NAME + ":", NAME + "/"))


def spec_bench_sets(spec: str) -> list[PromptSet]:
    """The six category sets (N per category with ``:N``), or the one ``/CATEGORY`` names."""
    chosen_category = _category(spec)
    per_category = parse_count(spec)
    by_category = _questions_by_category(QUESTIONS)
    sets = []
    for suffix, (categories, description) in CATEGORIES.items():
        if chosen_category not in (None, suffix):
            continue
        groups = [by_category.get(c, []) for c in categories]
        if per_category is not None:
            groups = [spread(group, n) for group, n in zip(groups, share(per_category, len(groups)))]
        chosen = sorted((q for group in groups for q in group), key=lambda q: q["question_id"])
        total = sum(len(by_category.get(c, [])) for c in categories)
        prompts = tuple(Prompt(str(q["question_id"]), q["turns"][0], category=q["category"],
                               turns=tuple(q["turns"]) if len(q["turns"]) > 1 else ()) for q in chosen)
        sets.append(PromptSet(f"{NAME}/{suffix}", f"Spec-Bench {description}: {len(prompts)} of {total} questions",
                              DEFAULT_MAX_NEW_TOKENS, prompts, spec))
    return sets


def _category(spec: str) -> str | None:
    """The CATEGORY of ``spec-bench/CATEGORY[:N]`` (None without one), one of the six."""
    if not spec.startswith(NAME + "/"):
        return None
    category = spec[len(NAME) + 1:].partition(":")[0]
    if category not in CATEGORIES:
        raise SpecchatError(f"--prompts {spec!r}: {category!r} is not a Spec-Bench category", key="--prompts",
                            hint=f"use {NAME}/CATEGORY[:N] with one of {', '.join(CATEGORIES)}")
    return category


def parse_count(spec: str) -> int | None:
    """N of ``spec-bench[/CATEGORY]:N`` (1 ≤ N ≤ 80), None without one."""
    _, colon, value = spec.partition(":")
    if not colon:
        return None
    fix = f"use {NAME}:N with N from 1 to {PER_CATEGORY} questions per category, or {NAME} for all"
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        raise SpecchatError(f"--prompts {spec!r}: N {value!r} is not a whole number", key="--prompts", hint=fix)
    count = int(value)
    if count < 1:
        raise SpecchatError(f"--prompts {spec!r}: N must be at least 1, got {count}", key="--prompts", hint=fix)
    if count > PER_CATEGORY:
        raise SpecchatError(f"--prompts {spec!r}: a category holds {PER_CATEGORY} questions, so N is at most "
                            f"{PER_CATEGORY}, got {count}", key="--prompts", hint=fix)
    return count


def share(count: int, parts: int) -> list[int]:
    """``count`` shared over ``parts`` in order: count // parts each, one more to the first count % parts."""
    return [count // parts + (1 if i < count % parts else 0) for i in range(parts)]


def spread(items: list, count: int) -> list:
    """``count`` of ``items``, evenly spaced by index: ``items[i * len(items) // count]``."""
    count = min(count, len(items))
    return [items[i * len(items) // count] for i in range(count)]


def _questions_by_category(path: Path) -> dict[str, list[dict]]:
    try:
        lines = untrusted.read_text(path).splitlines()
    except (OSError, untrusted.Unreadable) as error:
        raise SpecchatError(f"cannot read the Spec-Bench questions: {error}", file=str(path)) from None
    by_category: dict[str, list[dict]] = {}
    for number, line in enumerate(lines, 1):
        try:
            question = untrusted.json_value(line)
            question_id, category, turns = question["question_id"], question["category"], question["turns"]
            valid = isinstance(question_id, int) and turns and all(isinstance(t, str) and t for t in turns)
        except (untrusted.Unreadable, TypeError, KeyError):
            valid = False
        if not valid:
            raise SpecchatError(f"line {number} is not a Spec-Bench question", file=str(path),
                                hint="reinstall specchat")
        by_category.setdefault(str(category), []).append(question)
    for questions in by_category.values():
        questions.sort(key=lambda q: q["question_id"])
    return by_category
