"""What the transcript says about a reply beside its text: a footer of its figures, and a notice
when drafting changes character mid-chat; both read the source's snapshots, pure Python.
"""

from __future__ import annotations

from specchat.telemetry import MetricsSnapshot


def speedup_phrase(m: MetricsSnapshot) -> str:
    """"1.31× plain (95 %: 1.10–1.55)"; a busy machine's ratio says so in the same breath;
    "" where nothing was measured or the figures cannot tell (too few steps, noise)."""
    interval = m.measured_speedup_interval
    spread = f"95 %: {interval[0]:.2f}–{interval[1]:.2f}" if interval else ""
    if m.measured_speedup is not None:
        return f"{m.measured_speedup:.2f}× plain" + (f" ({spread})" if spread else "")
    if m.measured_speedup_busy is not None:
        return f"~{m.measured_speedup_busy:.2f}× plain (" + (f"{spread}; " if spread else "") + "busy machine, rough)"
    return ""


def reply_footer(m: MetricsSnapshot, hide_timing: bool = False) -> str:
    """A reply's figures in one line, as headless replay prints them: "332 tokens · 3.8
    tok/s · first token 420 ms · mean acceptance 1.62 · 1.31× plain (95 %: 1.10–1.55)".
    Wall-clock figures are left out under ``hide_timing``; acceptance and the speed-up
    only where something was drafted (plain decoding is 1× plain by definition)."""
    parts = [f"{m.num_tokens} token{'' if m.num_tokens == 1 else 's'}"]
    if not hide_timing and m.tokens_per_s is not None:
        parts.append(f"{m.tokens_per_s:.1f} tok/s")
    if not hide_timing and m.ttft_ms is not None:
        parts.append(f"first token {m.ttft_ms:,.0f} ms")
    if m.num_drafts and m.mean_acceptance_length is not None:
        parts.append(f"mean acceptance {m.mean_acceptance_length:.2f}")
    if m.num_drafts and not hide_timing and speedup_phrase(m):
        parts.append(speedup_phrase(m))
    return " · ".join(parts)


class AcceptanceWatch:
    """Says, once each time it starts to hold, that drafting changed character: acceptance
    collapsed (the text left what the draft knows) or jumped to nearly every draft (a loop),
    or γ = auto set drafting aside and took it up again. ``recent`` drafting steps are held
    against the session's earlier ones; ``collapse``: the share of the usual acceptance below
    which it collapsed; ``loop``: the acceptance a loop shows."""

    def __init__(self, recent: int = 12, collapse: float = 0.4, loop: float = 0.98) -> None:
        self.recent = recent
        self.collapse = collapse
        self.loop = loop
        self._active: set[str] = set()
        self._verdict: str | None = None

    def observe(self, session: MetricsSnapshot, gamma: int | str | None = None,
                hide_timing: bool = False) -> list[str]:
        """The notices the session's latest snapshot calls for (usually none)."""
        now = self._conditions(session, gamma, hide_timing)
        said = [text for kind, text in now.items() if kind not in self._active]
        if session.verdict is None:  # no verdict this time (not yet measured): the last one stands
            now.update({kind: "" for kind in self._active & {"set aside", "resumed"}})
        else:
            self._verdict = session.verdict
        self._active = set(now)
        return said

    def _conditions(self, m: MetricsSnapshot, gamma: int | str | None, hide_timing: bool) -> dict[str, str]:
        found: dict[str, str] = {}
        history = m.acceptance_history
        if len(history) >= 2 * self.recent:
            lately = sum(history[-self.recent:]) / self.recent
            earlier = history[:-self.recent]
            usual = sum(earlier) / len(earlier)
            if usual >= 0.3 and lately <= usual * self.collapse:
                found["collapse"] = (f"acceptance collapsed: the last {self.recent} drafting steps kept {lately:.0%} "
                                     f"of their drafts, {usual:.0%} before" + (
                                         "; γ = auto drafts less while it stays low" if gamma == "auto" else ""))
            elif lately >= self.loop and usual <= 0.8:
                found["loop"] = (f"acceptance jumped to {lately:.0%} over the last {self.recent} drafting steps "
                                 f"({usual:.0%} before): the reply may be repeating itself in a loop (Esc stops it)")
        set_aside = (gamma == "auto" and not hide_timing and m.verdict == "does not pay"
                     and (self._verdict == "pays" or "set aside" in self._active))
        if set_aside:
            found["set aside"] = ("γ = auto set drafting aside: no γ beats plain decoding now; it decodes plainly "
                                  "and probes now and then")
        # the notice above must not stand over a panel that says "pays" again: say the turn back
        elif gamma == "auto" and not hide_timing and m.verdict == "pays" and self._active & {"set aside", "resumed"}:
            found["resumed"] = "γ = auto drafts again: its cost model expects drafting to beat plain decoding here"
        return found
