"""Can this draft propose for this target? Checked once, before any generation.

An id must name the same token for both models, so the tokenizers' vocabularies
(token → id) are compared, not the embedding matrices (often padded past the vocabulary;
the engine handles that, sampling.on_vocab). Tokens only one side defines are fine; a
token with another id, or an id that names another token, is refused.

Design notes: docs/design/loading.md
"""

from __future__ import annotations

from ..config.model import Profile
from ..errors import ModelLoadError


def vocabulary_differences(target_vocab: dict[str, int], draft_vocab: dict[str, int]) -> list[tuple[int, str, str]]:
    """(id, draft's token, target's token) for every id the two maps disagree on: a token
    both have at different ids, or an id both define as different tokens. Sorted by id."""
    target_by_id = {i: t for t, i in target_vocab.items()}
    differ: dict[int, tuple[str, str]] = {}
    for token, draft_id in draft_vocab.items():
        target_token = target_by_id.get(draft_id)
        if target_token is not None and target_token != token:
            differ[draft_id] = (token, target_token)  # the id means another token
        elif token in target_vocab and target_vocab[token] != draft_id:
            differ[draft_id] = (token, f"id {target_vocab[token]}")  # the token has another id
    return [(i, d, t) for i, (d, t) in sorted(differ.items())]


def check_draft_compatible(target, target_tokenizer, draft, draft_tokenizer, profile: Profile) -> None:
    if draft_tokenizer is None:
        return  # same source (a derived draft): one tokenizer; padded rows either way are fine
    differ = vocabulary_differences(target_tokenizer.get_vocab(), draft_tokenizer.get_vocab())
    if differ:
        draft_id, draft_token, target_side = differ[0]
        target_side = f"the target has it at {target_side}" if target_side.startswith("id ") \
            else f"the target reads it as {target_side!r}"
        raise ModelLoadError(
            f"draft '{profile.speculation.draft.source}' and target '{profile.target.source}' have different "
            f"vocabularies: {len(differ)} ids differ, e.g. id {draft_id} is {draft_token!r} for the draft but "
            f"{target_side}",
            file=profile.source_path, key="speculation.draft.source",
            hint="pick a draft from the target's model family (same tokenizer), or use method = \"ngram\"",
        )
