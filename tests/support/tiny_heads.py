"""Random EAGLE-3 heads for tiny targets, built offline in milliseconds: the same
architecture and checkpoint layout as a trained or published head, with random weights."""

from __future__ import annotations

import torch

from specchat.heads.eagle3 import Eagle3Config, Eagle3Head


def random_eagle3_head(target, *, draft_vocab: int | None = None, layer_ids=(0, 1, 1), seed: int = 0,
                       scale: float = 3.0, dtype=torch.float64) -> Eagle3Head:
    """A head for the transformers model ``target`` whose draft vocabulary is the
    ``draft_vocab`` highest ids (all of them by default: the d2t map then shifts
    nothing), with its lm_head sharpened by ``scale`` so drafts are far from uniform."""
    cfg = target.config.to_dict()
    vocab = cfg["vocab_size"]
    config = Eagle3Config.for_target(cfg, layer_ids, draft_vocab or vocab)
    torch.manual_seed(seed)
    head = Eagle3Head(config, target.get_input_embeddings().weight.detach().to(dtype))
    with torch.no_grad():
        for name, param in head.named_parameters():
            if param.dim() == 2:
                torch.nn.init.normal_(param, std=1.0 / param.shape[1] ** 0.5)
        head.lm_head.weight.mul_(scale)
        head.d2t.fill_(vocab - config.draft_vocab_size)  # draft id d is target id d + offset
    return head.to(dtype).eval()


def random_medusa_head(target, *, num_heads: int = 3, num_layers: int = 1, draft_vocab: int | None = None,
                       seed: int = 0, scale: float = 3.0, like_target: float = 0.0, dtype=torch.float64):
    """Medusa-1 heads for the transformers model ``target`` (or a dict with hidden_size and
    vocab_size) whose rows are the ``draft_vocab`` highest ids (all by default), with
    random blocks and output maps sharpened by ``scale`` so drafts are far from uniform
    and each head's law differs from the others'. ``like_target`` > 0 starts each output
    map from the target's lm_head instead (Medusa's own initialisation) with that much
    noise per head: drafts then agree with the target more often, so samples run faster."""
    from specchat.heads.medusa import MedusaConfig, MedusaHead

    cfg = target if isinstance(target, dict) else target.config.to_dict()
    vocab, hidden = cfg["vocab_size"], cfg["hidden_size"]
    config = MedusaConfig(num_heads=num_heads, num_layers=num_layers, hidden_size=hidden, vocab_size=vocab,
                          draft_vocab_size=draft_vocab or vocab)
    torch.manual_seed(seed)
    head = MedusaHead(config)
    with torch.no_grad():
        for param in head.parameters():
            torch.nn.init.normal_(param, std=1.0 / hidden ** 0.5)
        for lm in head.lm_heads:
            lm.weight.mul_(scale)
        head.token_map.copy_(torch.arange(vocab - config.draft_vocab_size, vocab))
        if like_target:
            rows = target.lm_head.weight.detach()[head.token_map].to(torch.float32)
            for lm in head.lm_heads:
                lm.weight.copy_(rows + like_target * rows.std() * torch.randn_like(rows))
    return head.to(dtype).eval()
