"""What each row of the speculation panel means: the key F1 shows, keyed by the rows' own labels
(figures.py); a test checks every row has its entry.
"""

from __future__ import annotations

import textwrap

# (row label, meaning), in the panel's order: the verdict and its table first, then the
# details fold
PANEL_KEY: list[tuple[str, str]] = [
    ("verdict", "is speculation paying here? the cost model's answer, its one prediction "
                "(× plain decoding's speed) and what γ = auto is doing about it"),
    ("tokens", "tokens the reply (turn) or the whole chat (session) emitted"),
    ("tok/s", "tokens per second of decoding, the prompt's reading included"),
    ("mean accept len", "tokens each verification step emitted on average: 1 + kept drafts per drafting step"),
    ("draft accept rate", "share of the drafted tokens the target kept"),
    ("measured speed-up", "decoding speed over plain steps of the same chat, timed; 95 % its interval; "
                          "* a caveat under the table (a busy machine: the ratio is rough)"),
    ("steps", "target forward passes (each verifies γ drafts, or decodes one token plainly)"),
    ("γ (mean)", "drafts asked per drafting step, on average"),
    ("α measured", "the paper's α: Σ min(p, q) over the drafted positions, how alike draft and target are"),
    ("α empirical", "share of the verified draft positions whose draft was kept"),
    ("c (draft/target)", "a draft's cost as a share of one plain target step"),
    ("v(γ) verify cost", "verifying γ drafts (γ + 1 tokens) in plain-step units"),
    ("E tokens/round", "tokens a step is expected to emit at this α and γ: (1 − α^(γ+1)) / (1 − α)"),
    ("paper (no verify)", "the paper's predicted speed-up E / (γ·c + 1), which ignores what verifying costs"),
    ("predicted, as run", "the cost model's forecast for the steps as they ran: hold it against the measured one"),
    ("time to 1st tok", "the prompt's reading plus the first step of the latest reply (ms)"),
    ("recommended γ", "the γ the cost model would run now (0: plain decoding), with its prediction"),
    ("γ now", "the γ asked for in the latest step and, with γ = auto, why"),
    ("histograms", "how many drafts each step kept, how often each draft position was kept, and the "
                   "acceptance and γ of each step"),
]


def panel_key_lines(width: int = 72) -> list[str]:
    """The key as lines of at most ``width`` characters: a label, then its meaning wrapped under it."""
    lines = []
    for label, meaning in PANEL_KEY:
        lines += [label, *("    " + line for line in textwrap.wrap(meaning, width - 4) or [""])]
    return lines
