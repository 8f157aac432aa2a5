"""Can this draft propose for this target? Checked once, before any generation.

Speculative decoding compares the draft's and the target's probabilities of the
*same id*, so an id must name the same token for both. What is compared is the
tokenizers' real vocabularies (token → id), not the models' embedding matrices: those
are often padded past the vocabulary (Qwen2.5-7B has 152,064 rows, Qwen2.5-0.5B
151,936, one tokenizer), in either direction, and the engine handles that — q and p
live on the target's rows, ids past the draft's rows get q = 0 and the draft never
proposes an id past the target's (sampling.on_vocab). Tokens only one side defines
(extra special tokens, padding) are fine too; what is refused is a token with another
id, or an id that names another token.
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
