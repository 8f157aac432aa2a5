"""``specchat train-head --kind medusa`` on the tiny target, in seconds (--smoke): every
stage runs for real (distillation, a teacher-forced pass for final hidden states and
soft labels, training, export), the exported heads load in vLLM's Medusa layout, draft
through the engine and keep greedy decoding's reply; a --resume run redoes no stage.
The loss itself is checked to fall on a few positions (training moves the heads)."""

import json

import torch

from specchat.config import load_profile
from specchat.engine import SamplingParams
from specchat.engine.backends import as_backend
from specchat.engine.proposers.medusa import MedusaProposer
from specchat.engine.session import ChatSession
from specchat.heads.medusa import MedusaHead
from specchat.loading import load_models
from specchat.training.medusa import loss_and_hits, new_head, positions
from specchat.training.teacher import teach
from tests.support.folded import FoldedEngine
from tests.support.tiny_models import write_tiny_profile
from tests.training.test_train_head import train_head


def test_smoke_training_writes_medusa_heads_that_draft(tmp_path, tiny_model_dir):
    profile = write_tiny_profile(tmp_path / "tiny.toml", tiny_model_dir, method="ngram")
    out = tmp_path / "medusa"
    result = train_head("--profile", str(profile), "--kind", "medusa", "--heads", "3", "--smoke", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "held-out acceptance length" in result.stderr and "head written to" in result.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["MedusaModel"] and config["medusa_num_heads"] == 3

    loaded = load_models(load_profile(str(profile)))
    target = as_backend(loaded.target)
    head = MedusaHead.load(out, target)
    prompt = ChatSession(FoldedEngine(target, None), loaded.tokenizer).prompt_ids([{"role": "user", "content": "Hi"}])
    params = SamplingParams(temperature=0.0)
    plain = [t.id for s in FoldedEngine(target, None).generate(prompt, params, max_new_tokens=16) for t in s.tokens]
    target.reset()
    engine = FoldedEngine(target, MedusaProposer(head, target, 3))
    assert [t.id for s in engine.generate(prompt, params, max_new_tokens=16) for t in s.tokens] == plain
    assert engine.metrics.num_draft_tokens > 0

    again = train_head("--profile", str(profile), "--kind", "medusa", "--heads", "3", "--smoke", "--out", str(out),
                       "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "distill:" not in again.stderr and "teach:" not in again.stderr


def test_training_lowers_the_loss(target):
    """On 24 positions of the tiny target: 100 AdamW steps lower the loss."""
    import copy

    from specchat.engine.backends.transformers import TransformersBackend

    backend = TransformersBackend(copy.deepcopy(target).float())
    ids = [1, 2, 3, 1, 2, 3, 1, 2] + torch.randint(0, 16, (24,), generator=torch.Generator().manual_seed(0)).tolist()
    taught = teach(backend, ids, reply_start=8)  # no layers: the final hidden states
    head = new_head(3, 16, 16, torch.arange(16), backend.token_embeddings())
    data = positions([taught], 3, torch.arange(16))
    rows = torch.arange(data.h.shape[0])
    before = float(loss_and_hits(head, data, rows)[0].detach())
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-2)
    for _ in range(100):
        loss, _ = loss_and_hits(head, data, rows)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = float(loss_and_hits(head, data, rows)[0].detach())
    assert after < before - 0.5  # 6.78 → 6.0 here: the labels' own entropy bounds it below
