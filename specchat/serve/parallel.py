"""``serve --parallel N``: how many chats one batched llama.cpp context can hold, refused in
one line before the model loads where it can be known (at most 256 sequences in our builds)."""

from __future__ import annotations

from specchat.errors import SpecchatError

MIN_ROOM = 256  # tokens a chat holds at least (build_service's floor)


def check_parallel(parallel: int, n_ctx: int | None) -> None:
    """One line, exit 2, for an N no batched context can hold (before the model loads;
    N < 1 is check_profile's)."""
    import llama_cpp

    most = int(llama_cpp.llama_max_parallel_sequences())
    if parallel > most:
        raise too_many(parallel, n_ctx, f"llama.cpp batches at most {most} sequences in one context", most)


def too_many(parallel: int, n_ctx: int | None, why: str, fits: int | None = None) -> SpecchatError:
    """The error for ``--parallel N`` that llama.cpp cannot batch: why, each chat's share
    of n_ctx, and the largest N that fits (``fits``; by default the largest whose
    batched context is no larger than the target's own n_ctx)."""
    share = (f"each chat would get {n_ctx // parallel} tokens (n_ctx {n_ctx} / {parallel})" if n_ctx
             else f"each chat would get 1/{parallel} of the target's context")
    if fits is None:
        fits = max(1, (n_ctx or MIN_ROOM) // MIN_ROOM)
    return SpecchatError(f"--parallel {parallel} is more chats than fit: {why}; {share}", key="--parallel",
                         hint=f"use --parallel {fits} or fewer")
