"""What specchat knows about servers without talking to one: which figures a server's
stream cannot support, and the panel fields and the one line a server's description
gives. Pure Python: recordings and the remote chats read it."""

from __future__ import annotations

from specchat.methods import REMOTE_BACKENDS

# What a server's stream cannot tell: the draft's cost (c), so neither the α-vs-c
# prediction nor v(k). They stay None ({} for verify_cost) — "not derivable from the
# server" — rather than the 0 an unknown draft time would give (telemetry.masked).
UNDERIVABLE = ("draft_forward_ms", "cost_ratio", "predicted_speedup_paper", "predicted_speedup",
               "predicted_speedup_steps", "breakeven", "speedup_lower_bound", "best_gamma",
               "recommended_gain", "verdict", "arithmetic_increase", "verify_cost")


def is_server_session(models) -> bool:
    """Whether a recording header's ``models`` describe a server (see :func:`server_fields`)."""
    return isinstance(models, dict) and models.get("backend") in REMOTE_BACKENDS


def is_remote(profile) -> bool:
    return getattr(profile.target, "backend", "") in REMOTE_BACKENDS


def server_fields(server: dict) -> dict:
    """``BackendInfo`` fields for a server's description (live, or from a recording's
    header — untrusted there, so only well-typed values are used): its drafting method
    and γ size the panel; ``details.speculation_source`` says what is known or inferred."""
    gamma = server.get("server_num_speculative_tokens")
    gamma = gamma if isinstance(gamma, int) and not isinstance(gamma, bool) and 0 <= gamma <= 64 else 0
    spec = server.get("server_speculative")
    kind = spec.get("type") if isinstance(spec, dict) and isinstance(spec.get("type"), str) else "server"
    source = server.get("speculation_source")
    speculates = server.get("server_speculates", bool(gamma)) is True
    return {"method": kind if speculates else "none", "num_speculative_tokens": gamma,
            "max_gamma": gamma or 8,
            "details": {"speculation_source": source if isinstance(source, str) else "",
                        "not_derivable": list(UNDERIVABLE)}}


def support_line(info: dict) -> str:
    """One line: what the server serves and how it speculates (``profiles check``, and
    the first thing a chat or ``run`` reports on connecting)."""
    gamma = info.get("server_num_speculative_tokens") or 0
    spec = info.get("server_speculative") or {}
    how = (f"speculation {spec.get('type', '?')}, γ {gamma or 'unknown until it drafts'}"
           if info.get("server_speculates") else "no speculation")
    return (f"{info.get('backend')} at {info.get('url')} serves {info.get('target') or '?'}; {how} — "
            f"{info.get('speculation_source')}")
