"""``train-head`` as named stages, each resumable (``--resume``) from what it left in the work
folder: corpus → distill (``distilled.jsonl``) → vocabulary → teach (``taught/``) → train
(``checkpoint/`` every epoch) → export (SpecForge's EAGLE-3 layout, plus ``training.json``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from specchat.heads.eagle3 import Eagle3Config, Eagle3Head, save_eagle3
from specchat.training.corpus import split, training_prompts
from specchat.training.teacher import Taught, teach
from specchat.training.train import History, TrainConfig, draft_index, train
from specchat.training.workdir import read_distilled


@dataclass
class Plan:
    """What to train; ``smoke`` shrinks everything to a seconds-long run (CI)."""

    prompts: int = 0  # 0: the whole corpus
    held_out: int = 24
    max_new_tokens: int = 160
    draft_vocab: int = 4096
    replies: int = 1  # per prompt: one greedy, the rest sampled
    n_seq: int = 0  # sequences generated together; 0: by the target's size
    train: TrainConfig = field(default_factory=TrainConfig)


def layer_ids_for(num_layers: int) -> tuple[int, int, int]:
    """Low, middle and high layer, as vLLM and llama.cpp default them."""
    return (min(2, num_layers - 1), num_layers // 2, max(0, num_layers - 3))


def early_exit(head: Eagle3Head, lm_rows: torch.Tensor) -> None:
    """Starts the head as the target's own early exit: ``fc`` passes the high layer's
    input through, the decoder layer adds (almost) nothing, and ``lm_head`` is the
    target's embedding rows (its output head, for tied-embedding models). Without the
    target's final norm weights this start drafts no better than a random one; it is kept
    because the shipped head was trained from it (docs/benchmarks/why-the-numbers.md)."""
    h = head.config.hidden_size
    if head.config.target_hidden_size == h:
        head.fc.weight.zero_()
        head.fc.weight[:, -h:] = torch.eye(h)  # the high layer's slice (layer_ids[2])
    head.o_proj.weight.mul_(1e-3)
    head.down_proj.weight.mul_(1e-3)
    head.lm_head.weight.copy_(lm_rows)


class Stages:
    def __init__(self, backend, tokenizer, work: Path, plan: Plan, bar: Callable, say: Callable[[str], None]) -> None:
        self.backend, self.tokenizer, self.work, self.plan, self.bar, self.say = backend, tokenizer, work, plan, bar, say
        work.mkdir(parents=True, exist_ok=True)
        self.seconds: dict[str, float] = {}  # stage → seconds this run spent in it (training.json)

    # --- distill ----------------------------------------------------------------------
    def distill(self) -> list[dict]:
        """Each prompt answered ``plan.replies`` times, a row per finished reply in
        ``distilled.jsonl``; where the generator hands out features and laws too (llama.cpp),
        each reply's ``Taught`` goes to ``taught/`` first (the teach stage then skips it)."""
        prompts = training_prompts()[: self.plan.prompts or None]  # 0: all of them
        replies = max(1, self.plan.replies)
        path = self.work / "distilled.jsonl"
        # a resumed run may train on fewer prompts
        done = {row["index"]: row for row in read_distilled(path)
                if row["prompt"] < len(prompts) and row["replies"] == replies}
        todo = [k for k in range(len(prompts) * replies) if k not in done]
        if todo:
            from specchat.engine.template import ChatTemplate

            template = ChatTemplate(self.tokenizer)
            chats = [template.prompt_ids([{"role": "user", "content": prompts[k // replies]}]) for k in todo]
            # greedy and sampled replies: the first of each prompt's greedy, or (one reply a
            # prompt) every other prompt's
            temperatures = [0.0 if (k % replies if replies > 1 else k % 2) == 0 else 0.8 for k in todo]
            started = time.perf_counter()
            progress = self.bar(len(todo) * self.plan.max_new_tokens, f"distill: {len(todo)} replies (tokens, at most)")
            (self.work / "taught").mkdir(exist_ok=True)
            with path.open("a") as out:
                for j, sample in self._generate(chats, temperatures, progress.update):
                    k = todo[j]
                    if sample.taught is not None:
                        self._keep_taught(k, sample.taught)
                    row = {"index": k, "prompt": k // replies, "replies": replies, "greedy": temperatures[j] == 0.0,
                           "ids": sample.ids, "reply_start": sample.reply_start}
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    done[k] = row
            progress.close()
            self.seconds["distill"] = round(time.perf_counter() - started, 1)
        _, held_out = split(list(range(len(prompts))), self.plan.held_out)
        for row in done.values():
            row["held_out"] = row["prompt"] in set(held_out)
        return [done[k] for k in sorted(done)]

    def n_seq(self) -> int:
        """Sequences decoded together: 32 for a small target (its batches are still cheaper
        per token: docs/benchmarks/why-the-numbers.md), 8 else."""
        return self.plan.n_seq or (32 if self.backend.hidden_size <= 1024 else 8)

    def _generate(self, chats, temperatures, update):
        from specchat.training.distill import Sample

        if self.backend.name == "llama.cpp":
            from specchat.training.distill import BatchedGenerator

            layers = layer_ids_for(self.backend.num_layers) if self.backend.provides_features else ()
            generator = BatchedGenerator(self.backend, n_seq=self.n_seq(), n_ctx_per_seq=self.plan.max_new_tokens + 320,
                                         layer_ids=layers)
            try:
                yield from generator.generate(chats, self.plan.max_new_tokens, temperatures, progress=update)
            finally:
                generator.close()
            return
        from specchat.engine import SamplingParams, SpeculativeEngine

        self.backend.reset()
        engine = SpeculativeEngine(self.backend, None)
        for k, chat in enumerate(chats):
            params = SamplingParams(temperature=temperatures[k], seed=k)
            reply = []
            for step in engine.generate(chat, params, max_new_tokens=self.plan.max_new_tokens):
                reply += [t.id for t in step.tokens]
                update(len(step.tokens))
            yield k, Sample(list(chat) + reply, len(chat))

    def _taught_path(self, index: int, folder: str = "taught") -> Path:
        return self.work / folder / f"{index}.safetensors"

    def _keep_taught(self, index: int, t: Taught, folder: str = "taught") -> None:
        from safetensors.torch import save_file

        save_file({"ids": t.ids, "features": t.features, "top_ids": t.top_ids, "top_p": t.top_p},
                  str(self._taught_path(index, folder)), metadata={"reply_start": str(t.reply_start)})

    # --- vocabulary ---------------------------------------------------------------------
    def vocabulary(self, rows: list[dict]) -> tuple[torch.Tensor, float]:
        """(the draft vocabulary's target ids, ascending, [V_draft]; the share of reply
        tokens it covers). The most frequent reply tokens, plus the end-of-turn ids."""
        counts = torch.zeros(self.backend.vocab_size, dtype=torch.long)
        for row in rows:
            if not row["held_out"]:
                counts += torch.bincount(torch.tensor(row["ids"][row["reply_start"]:], dtype=torch.long),
                                         minlength=self.backend.vocab_size)
        ranked = counts.clone()
        for eos in self.backend.eos_token_ids:
            ranked[eos] = ranked.max() + 1  # a draft must be able to end the reply
        size = min(self.plan.draft_vocab, self.backend.vocab_size)
        ids = ranked.topk(size).indices.sort().values
        covered = float(counts[ids].sum()) / max(1, int(counts.sum()))
        return ids, covered

    # --- teach ----------------------------------------------------------------------------
    def teach(self, rows: list[dict], layer_ids: tuple[int, ...]) -> list[Taught]:
        """Each row's ``Taught``: the one distillation kept, else a teacher-forced pass."""
        return self.taught(rows, "taught", "features and soft labels",
                           lambda ids, reply_start: teach(self.backend, ids, reply_start, layer_ids))

    def taught(self, rows: list[dict], folder: str, what: str, compute: Callable[[list[int], int], Taught]) -> list[Taught]:
        """Each row's ``Taught`` kept in ``folder``, ``compute(ids, reply_start)`` making
        the ones not kept yet (ids cut to 512 or the target's context)."""
        from safetensors import safe_open

        (self.work / folder).mkdir(exist_ok=True)
        limit = min(512, self.backend.max_length)
        missing = [row for row in rows if not self._taught_path(row["index"], folder).exists()]
        if missing:
            started = time.perf_counter()
            progress = self.bar(len(missing), f"teach: {what} (replies)")
            for row in missing:
                self._keep_taught(row["index"], compute(row["ids"][:limit], row["reply_start"]), folder)
                progress.update(1)
            progress.close()
            self.backend.reset()
            self.seconds["teach"] = round(time.perf_counter() - started, 1)
        taught = []
        for row in rows:
            with safe_open(str(self._taught_path(row["index"], folder)), "pt") as f:
                t = {name: f.get_tensor(name) for name in f.keys()}
                taught.append(Taught(t["ids"][:limit], t["features"][:limit], t["top_ids"][:limit], t["top_p"][:limit],
                                     int(f.metadata()["reply_start"])))
        return taught

    # --- train + export -------------------------------------------------------------------
    def new_head(self, layer_ids: tuple[int, ...], draft_ids: torch.Tensor, embed: torch.Tensor) -> Eagle3Head:
        b = self.backend
        target = {"hidden_size": b.hidden_size, **self._shape(), "vocab_size": b.vocab_size,
                  "max_position_embeddings": b.max_length}
        config = Eagle3Config.for_target(target, layer_ids, int(draft_ids.numel()))
        head = Eagle3Head(config, embed)
        with torch.no_grad():
            head.d2t.copy_(draft_ids - torch.arange(draft_ids.numel()))
            early_exit(head, embed[draft_ids])
        return head

    def _shape(self) -> dict[str, int]:
        """The target's MLP width and attention heads: a GGUF's metadata (llama.cpp), else its config."""
        meta = getattr(getattr(self.backend, "llm", None), "metadata", {}) or {}
        arch = meta.get("general.architecture", "llama")
        if f"{arch}.attention.head_count" in meta:
            n = int(meta[f"{arch}.attention.head_count"])
            return {"intermediate_size": int(meta[f"{arch}.feed_forward_length"]), "num_attention_heads": n,
                    "num_key_value_heads": int(meta.get(f"{arch}.attention.head_count_kv", n))}
        config = self.backend.model.config
        return {"intermediate_size": int(config.intermediate_size), "num_attention_heads": int(config.num_attention_heads),
                "num_key_value_heads": int(getattr(config, "num_key_value_heads", config.num_attention_heads))}

    def train_and_export(self, taught, rows, layer_ids, draft_ids, out: Path, resume: bool) -> History:
        b, embed = self.backend, self.backend.token_embeddings()
        train_set = [t for t, r in zip(taught, rows) if not r["held_out"]]
        held_out = [t for t, r in zip(taught, rows) if r["held_out"] and r["greedy"]]

        def said(last: dict) -> str:
            return (", ".join(f"γ={g}: {last[f'mean_acceptance_length@{g}']}" for g in self.plan.train.gammas)
                    + f"; per position {last['acceptance_by_position']}")

        def run(head: Eagle3Head, history: History, keep: Callable[[History], None]) -> History:
            head.embed.requires_grad_(False)
            return train(head, train_set, held_out, draft_index(draft_ids, b.vocab_size), self.plan.train, self.bar,
                         history, keep)

        return self.checkpointed(
            "checkpoint", out, resume, save_eagle3, lambda: self.new_head(layer_ids, draft_ids, embed),
            lambda path: Eagle3Head.load(path, b),
            run, said, {"layer_ids": list(layer_ids), "train_samples": len(train_set),
                        "held_out_samples": len(held_out)})

    def checkpointed(self, folder: str, out: Path, resume: bool, save: Callable, new: Callable[[], torch.nn.Module],
                     load: Callable[[Path], torch.nn.Module], run: Callable, said: Callable[[dict], str],
                     report: dict) -> History:
        """``run(head, history, keep)`` over the head kept in ``work/folder`` (resumed from there,
        else ``new()``), ``keep`` saving it after each epoch; then the head and ``training.json``
        (``report`` after the history and plan) go to ``out``."""
        checkpoint = self.work / folder
        history = History()
        if resume and (checkpoint / "history.json").exists():
            head = load(checkpoint)
            history = History(**json.loads((checkpoint / "history.json").read_text()))
            self.say(f"resuming after epoch {history.epochs_done}")
        else:
            head = new()

        def keep(h: History) -> None:
            save(head, checkpoint, dtype=torch.float32)
            (checkpoint / "history.json").write_text(json.dumps(asdict(h)))
            self.say(f"epoch {h.epochs_done}: loss {h.loss[-1]:.3f}, held-out acceptance length {said(h.held_out[-1])}")

        started = time.perf_counter()
        try:
            history = run(head, history, keep)
        finally:
            if history.epochs_done:
                save(load(checkpoint), out)
                (out / "training.json").write_text(json.dumps({
                    "history": asdict(history), "plan": asdict(self.plan), **report,
                    "train_seconds": round(time.perf_counter() - started, 1), "stage_seconds": self.seconds},
                    indent=2) + "\n")
        return history

