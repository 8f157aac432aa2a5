"""What Ctrl+O offers to copy: every reply and every code block in them, newest first (Ctrl+O,
Enter copies the last reply); texts as the transcript shows them, labels one line each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# a fenced block: ``` or ~~~ (three or more), an info string, the code, the same fence
# again (CommonMark's rule: the closing fence is at least as long as the opening one)
_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<code>.*?)(?:^(?P=fence)[`~]*[ \t]*$|\Z)",
                    re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class CodeBlock:
    language: str  # the fence's info string's first word, "" if none
    code: str  # without the fences; its last newline dropped


def code_blocks(text: str) -> list[CodeBlock]:
    """The fenced code blocks of a Markdown reply, in order (one left open at the end of
    a reply cut short runs to its end)."""
    blocks = []
    for match in _FENCE.finditer(text):
        info = match.group("info").strip()
        code = match.group("code")
        blocks.append(CodeBlock(info.split()[0] if info else "", code[:-1] if code.endswith("\n") else code))
    return blocks


@dataclass(frozen=True)
class CopyChoice:
    label: str  # one line, for the list
    text: str  # what goes to the clipboard
    what: str  # what the notice says was copied ("reply 3", "code block 1 of reply 3")


def first_line(text: str, width: int) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def copy_choices(replies: list[str], width: int = 60) -> list[CopyChoice]:
    """``replies``: the chat's reply texts, oldest first. Newest first: each reply, then
    its code blocks."""
    choices = []
    for number in range(len(replies), 0, -1):
        text = replies[number - 1]
        last = " (last)" if number == len(replies) else ""
        name = f"reply {number}"
        label = f"{name}{last} · {len(text):,} characters · {first_line(text, width)}"
        choices.append(CopyChoice(label, text, name))
        for i, block in enumerate(code_blocks(text), 1):
            lines = block.code.count("\n") + 1 if block.code else 0
            language = f"{block.language} · " if block.language else ""
            what = f"code block {i} of {name}"
            label = f"    {what} · {language}{lines} line{'' if lines == 1 else 's'} · {first_line(block.code, width)}"
            choices.append(CopyChoice(label, block.code, what))
    return choices
