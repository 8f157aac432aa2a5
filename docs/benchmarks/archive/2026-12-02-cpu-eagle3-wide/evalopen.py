"""Offline T = 0 acceptance of EAGLE-3 heads on held-out prompts (the archive README's
"the head on a wider corpus" figures). The default profile's target answers each prompt
greedily (256 tokens), its features and laws are taken teacher-forced, and each head's
chain is scored as train-head's held-out curve scores it (training/train.py ``evaluate``).

usage, from the project root:
  OPEN_SETS=open OPEN_CACHE=/tmp/open.pt python evalopen.py HEAD_DIR...
  OPEN_SETS=docs/benchmarks/archive/2026-12-02-cpu-eagle3-wide/open2.toml OPEN_CACHE=/tmp/open2.pt python evalopen.py HEAD_DIR...
OPEN_SETS: bench set names or .toml paths, comma-separated; OPEN_CACHE keeps the replies
(tensors only, loaded with weights_only) so several heads score on the same text."""
import sys, os, torch, tomllib, time
from pathlib import Path
from specchat.config import load_profile
from specchat.loading import load_models
from specchat.engine.backends import as_backend
from specchat.training.teacher import teach, Taught
from specchat.training.train import TrainConfig, evaluate
from specchat.training.ttt import collate, ttt_forward, chain_lengths
from specchat.heads.checkpoint import load_eagle3

profile = load_profile("default")
loaded = load_models(profile, progress=lambda e: None)
backend = as_backend(loaded.target)
torch.set_num_threads(2)
cache = Path(os.environ.get("OPEN_CACHE", "/tmp/open_taught.pt"))
N = int(os.environ.get("OPEN_TOKENS", "256"))
if cache.exists():
    taught = [Taught(t["ids"], t["features"], t["top_ids"], t["top_p"], int(t["reply_start"]))
              for t in torch.load(cache, weights_only=True)]  # tensors only: no pickled objects
else:
    from specchat.engine.chat import ChatSession
    from specchat.engine.engine import SpeculativeEngine
    from specchat.engine import SamplingParams
    sets = os.environ.get("OPEN_SETS", "open").split(",")
    texts = []
    for s in sets:
        texts += [p["text"] for p in tomllib.loads(Path(s if s.endswith(".toml") else f"specchat/bench/prompts/{s}.toml").read_text())["prompts"]]
    session = ChatSession(SpeculativeEngine(backend, None), loaded.tokenizer)
    taught = []
    for text in texts:
        chat = session.prompt_ids([{"role": "user", "content": text}])
        backend.reset()
        eng = SpeculativeEngine(backend, None)
        reply = []
        for step in eng.generate(chat, SamplingParams(temperature=0.0), max_new_tokens=N):
            reply += [t.id for t in step.tokens]
        t = teach(backend, list(chat) + reply, len(chat), (2, 15, 27))
        taught.append(t)
    torch.save([{"ids": t.ids, "features": t.features, "top_ids": t.top_ids, "top_p": t.top_p,
                 "reply_start": torch.tensor(t.reply_start)} for t in taught], cache)
print(f"{len(taught)} replies, {sum(len(t.ids) - t.reply_start for t in taught)} reply tokens")
embed = backend.token_embeddings()
cfg = TrainConfig(steps=4, batch_tokens=4096, max_len=1024)
for d in sys.argv[1:]:
    head = load_eagle3(d, target_hidden=backend.hidden_size, target_vocab=backend.vocab_size,
                       target_layers=backend.num_layers, embed=embed).eval()
    draft_ids = head.draft_ids()
    index = torch.full((backend.vocab_size,), -1, dtype=torch.long)
    index[draft_ids] = torch.arange(draft_ids.numel())
    r = evaluate(head, taught, index, cfg)
    # by position bucket
    out = []
    for t in taught:
        b = collate([t], index, cfg.max_len)
        with torch.no_grad():
            _, correct = ttt_forward(head, b, 4)
        ch = chain_lengths(correct[:3]).clamp_max(3)[0]
        rs = t.reply_start
        out.append((ch[rs - 1: len(t.ids) - 1], ))
    allc = torch.cat([o[0] for o in out]).float()
    first = torch.cat([o[0][:128] for o in out]).float()
    late = torch.cat([o[0][128:] for o in out]).float()
    cov = sum(int((index[t.ids[t.reply_start:]] >= 0).sum()) for t in taught) / sum(len(t.ids) - t.reply_start for t in taught)
    print(d, {k: v for k, v in r.items() if k.startswith("mean") or k.startswith("acc")},
          f"γ3 first128 {1 + first.mean():.3f} after128 {1 + late.mean() if len(late) else float('nan'):.3f} vocab-cover {cov:.3f}")
