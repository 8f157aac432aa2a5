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
