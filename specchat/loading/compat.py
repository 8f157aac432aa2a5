"""Can this draft propose for this target? An id must name the same token for both: their
vocabularies are compared once, before any generation. Design notes: docs/design/loading.md"""

from __future__ import annotations

from ..config.model import Profile
from ..errors import ModelLoadError


def check_draft_compatible(target_tokenizer, draft_tokenizer, profile: Profile) -> None:
    if draft_tokenizer is None:
        return  # same source (a derived draft): one tokenizer; padded rows either way are fine
    target_vocab = target_tokenizer.get_vocab()
    target_by_id = {i: t for t, i in target_vocab.items()}
    differ: dict[int, str] = {}  # draft id → how the two disagree on it
    for token, draft_id in draft_tokenizer.get_vocab().items():
        target_token = target_by_id.get(draft_id)
        if target_token is not None and target_token != token:  # the id means another token
            differ[draft_id] = f"{token!r} for the draft but the target reads it as {target_token!r}"
        elif token in target_vocab and target_vocab[token] != draft_id:  # the token has another id
            differ[draft_id] = f"{token!r} for the draft but the target has it at id {target_vocab[token]}"
    if differ:
        first = min(differ)
        raise ModelLoadError(
            f"draft '{profile.speculation.draft.source}' and target '{profile.target.source}' have different "
            f"vocabularies: {len(differ)} ids differ, e.g. id {first} is {differ[first]}",
            file=profile.source_path, key="speculation.draft.source",
            hint="pick a draft from the target's model family (same tokenizer), or use method = \"ngram\"",
        )
