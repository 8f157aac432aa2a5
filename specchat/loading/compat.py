"""Can this draft propose for this target? Checked once, before any generation.

Speculative decoding compares the draft's and the target's probabilities of the
*same id*, so every id the draft can emit must name the same token for both.
Embedding matrices are often padded past the vocabulary (so their sizes may
differ harmlessly); what must agree is the tokenizers' token → id maps.
"""

from __future__ import annotations

from ..config.model import Profile
from ..errors import ModelLoadError


def check_draft_compatible(target, target_tokenizer, draft, draft_tokenizer, profile: Profile) -> None:
    target_rows = target.get_output_embeddings().weight.shape[0]
    draft_rows = draft.get_output_embeddings().weight.shape[0]
    file = profile.source_path
    if draft_tokenizer is None:
        # Same source (a derived draft): one tokenizer, so only the output sizes can differ.
        if draft_rows > target_rows:
            raise ModelLoadError(f"the draft can emit {draft_rows} ids but the target only {target_rows}",
                                 file=file, key="speculation.draft", hint="use a draft with the target's vocabulary")
        return
    target_vocab = target_tokenizer.get_vocab()
    draft_vocab = draft_tokenizer.get_vocab()
    by_id_target = {i: t for t, i in target_vocab.items()}
    differ = []
    for token, draft_id in draft_vocab.items():
        if draft_id >= draft_rows:
            continue  # the draft cannot emit it
        if draft_id >= target_rows:
            differ.append((draft_id, token, None))
        elif by_id_target.get(draft_id) != token:
            differ.append((draft_id, token, by_id_target.get(draft_id)))
    if differ:
        differ.sort()
        draft_id, draft_token, target_token = differ[0]
        target_side = "has no such id" if target_token is None else f"reads it as {target_token!r}"
        raise ModelLoadError(
            f"draft '{profile.speculation.draft.source}' and target '{profile.target.source}' have different "
            f"vocabularies: {len(differ)} ids differ, e.g. id {draft_id} is {draft_token!r} for the draft but the "
            f"target {target_side}",
            file=file, key="speculation.draft.source",
            hint="pick a draft from the target's model family (same tokenizer), or use method = \"ngram\"",
        )
