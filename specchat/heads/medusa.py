"""Medusa-1 heads (Cai et al. 2024) in torch: head i reads the target's final hidden state
h_P and predicts the token at P + 2 + i through residual blocks x ← x + SiLU(W x + b) and a
linear map; ``token_map`` names each output row's target id. Checkpoints: vLLM's layout
(no bias tensors: zero biases) and FasterDecoding's read; vLLM's written, with
FasterDecoding's config keys (docs/design/heads.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from specchat.errors import ModelLoadError
from specchat.heads.checkpoint import Head, HeadError, read_config, read_tensors, take, weights_file, write_checkpoint

_VLLM_BLOCK = re.compile(r"blocks\.(\d+)\.layers\.(\d+)\.(weight|bias)")
_VLLM_LM = re.compile(r"lm_heads\.(\d+)\.weight")
_FD_BLOCK = re.compile(r"(\d+)\.(\d+)\.linear\.(weight|bias)")
_FD_LM = re.compile(r"(\d+)\.(\d+)\.weight")
_PREFIXES = ("medusa_heads.", "medusa_head.")


@dataclass(frozen=True)
class MedusaConfig:
    """``vocab_size`` is the target's; ``draft_vocab_size`` the heads' rows (≤ it)."""

    num_heads: int
    num_layers: int
    hidden_size: int
    vocab_size: int
    draft_vocab_size: int
    extra: dict = field(default_factory=dict, compare=False)  # other keys, kept on save

    def to_json(self) -> dict:
        """FasterDecoding's key names (``medusa_num_heads``, ``medusa_num_layers``), which
        vLLM's MedusaConfig maps onto its own. No other key may contain both "num" and
        "heads" (or "layers"): vLLM's loader would take it for the head (layer) count."""
        config = {k: v for k, v in self.extra.items() if not ("num" in k and ("heads" in k or "layers" in k))}
        config.update({
            "architectures": ["MedusaModel"], "model_type": "medusa",
            "medusa_num_heads": self.num_heads, "medusa_num_layers": self.num_layers,
            "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
            "medusa_fc_bias": True,  # vLLM builds the blocks without bias unless told
            "torch_dtype": "bfloat16",
        })
        if self.draft_vocab_size != self.vocab_size:
            config["truncated_vocab_size"] = self.draft_vocab_size
        return config


class MedusaHead(Head):
    """All heads of one checkpoint. ``blocks[i][j]`` is head i's j-th residual linear map
    [H, H] (with bias); ``lm_heads[i]`` its [V_draft, H] output map."""

    kind, reads, title = "medusa", "final_hidden", "a Medusa checkpoint"  # heads/checkpoint.py's Head says what each is
    architecture, config_key = "medusa", "medusa_num_heads"
    unrecognised = ("not a Medusa head (config.json has no medusa_num_heads)",
                    "give a Medusa-1 checkpoint (FasterDecoding/Medusa or vLLM's MedusaModel)")

    def __init__(self, config: MedusaConfig) -> None:
        super().__init__()
        c = self.config = config
        self.blocks = nn.ModuleList(
            nn.ModuleList(nn.Linear(c.hidden_size, c.hidden_size, bias=True) for _ in range(c.num_layers))
            for _ in range(c.num_heads))
        self.lm_heads = nn.ModuleList(
            nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False) for _ in range(c.num_heads))
        self.register_buffer("token_map", torch.arange(c.draft_vocab_size, dtype=torch.long))

    @property
    def num_heads(self) -> int:
        return self.config.num_heads

    def head_logits(self, hidden: torch.Tensor, i: int) -> torch.Tensor:
        """Head i on final hidden states [..., H] → logits [..., V_draft] for the token
        i + 2 positions after each."""
        x = hidden.to(self.lm_heads[i].weight.dtype)
        for layer in self.blocks[i]:
            x = x + nn.functional.silu(layer(x))
        return self.lm_heads[i](x)

    def forward(self, hidden: torch.Tensor, num_heads: int | None = None) -> torch.Tensor:
        """The first ``num_heads`` heads (all by default) → logits [num_heads, ..., V_draft]."""
        n = self.config.num_heads if num_heads is None else num_heads
        return torch.stack([self.head_logits(hidden, i) for i in range(n)])

    @classmethod
    def load(cls, directory: Path, target) -> MedusaHead:
        """The heads in ``directory``, checked against ``target``'s hidden size and vocabulary."""
        raw = read_config(directory, cls)
        path = directory / "config.json"
        num_heads = _int(raw, ("medusa_num_heads", "num_heads"), path)
        num_layers = _int(raw, ("medusa_num_layers", "num_hidden_layers"), path, default=1)
        if num_heads is None:
            raise HeadError("config.json does not say how many heads there are", file=str(path),
                            hint="add medusa_num_heads")
        weights = weights_file(directory)
        tensors = _our_names(read_tensors(weights), num_layers, weights)
        shared = tensors.pop("lm_heads.shared.weight", None)
        if shared is None and raw.get("original_lm_head"):
            shared = tensors.get("lm_heads.0.weight")  # vLLM reads that one as the shared map
        if shared is not None:
            tensors.update({f"lm_heads.{i}.weight": shared for i in range(num_heads)})
        first = tensors.get("lm_heads.0.weight")
        if first is None or first.dim() != 2:
            raise HeadError("tensor lm_heads.0.weight (FasterDecoding: 0.{L}.weight) is missing", file=str(weights),
                            hint="the file is incomplete or another kind of checkpoint")
        draft_vocab, hidden = (int(n) for n in first.shape)
        hidden_cfg = _int(raw, ("hidden_size",), path, default=hidden)
        vocab = _int(raw, ("vocab_size",), path, default=draft_vocab)
        draft_vocab_cfg = _int(raw, ("truncated_vocab_size",), path, default=vocab)
        mismatch = []
        if hidden_cfg != target.hidden_size:
            mismatch.append(f"hidden size {hidden_cfg} ≠ the target's {target.hidden_size}")
        if vocab != target.vocab_size:
            mismatch.append(f"vocabulary {vocab} ≠ the target's {target.vocab_size}")
        if mismatch:
            raise HeadError("the head was built for another target: " + "; ".join(mismatch), file=str(path),
                            hint="use a Medusa head trained for this model")
        config = MedusaConfig(num_heads=num_heads, num_layers=num_layers, hidden_size=hidden_cfg, vocab_size=vocab,
                              draft_vocab_size=draft_vocab_cfg,
                              extra={k: v for k, v in raw.items() if k not in ("architectures",)})
        head = cls(config)
        expected = dict(head.state_dict())
        biases = [name for name in expected if name.endswith(".bias")]
        if not any(name in tensors for name in biases):  # vLLM's default: blocks without bias
            tensors.update({name: torch.zeros_like(expected[name]) for name in biases})
        said = f" (config.json says {num_heads} heads of {num_layers} layer(s))"
        state = {name: take(tensors, name, want, weights, said, "the file is incomplete or config.json is wrong")
                 for name, want in expected.items() if name != "token_map"}
        token_map = tensors.pop("token_map", None)
        if token_map is None and draft_vocab_cfg != vocab:
            raise HeadError(f"truncated_vocab_size is {draft_vocab_cfg} but the file has no token_map",
                            file=str(weights), hint="the file is incomplete")
        token_map = torch.arange(draft_vocab_cfg) if token_map is None else token_map.to(torch.long).flatten()
        if (token_map.numel() != draft_vocab_cfg or int(token_map.min()) < 0 or int(token_map.max()) >= vocab
                or token_map.unique().numel() != token_map.numel()):
            raise HeadError("token_map does not map the heads' rows one-to-one into the target's vocabulary",
                            file=str(weights), hint="the head is damaged or for another tokenizer")
        extra = sorted(name for name in tensors if name.startswith("lm_heads.") or name.startswith("blocks."))
        if extra:
            raise HeadError(f"tensor {extra[0]} is not among the {num_heads} heads of {num_layers} layer(s) "
                            "config.json names", file=str(weights),
                            hint="config.json and the weights do not belong together")
        state["token_map"] = token_map
        head.load_state_dict(state)
        return head.eval()

    def check(self, speculation) -> None:
        gamma = speculation.num_speculative_tokens
        if isinstance(gamma, int) and gamma > self.num_heads:
            raise ModelLoadError(f"num_speculative_tokens = {gamma}, but the Medusa checkpoint has {self.num_heads} "
                                 "heads (one per draft)", key="speculation.num_speculative_tokens",
                                 hint=f'set num_speculative_tokens to at most {self.num_heads}, or "auto"')

    def describe(self) -> dict:
        return {"draft_vocab": self.config.draft_vocab_size, "kind": self.kind, "heads": self.num_heads,
                "layers": self.config.num_layers}


def save_medusa(head: MedusaHead, directory: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Writes the heads in vLLM's layout (weights in ``dtype``; token_map int64 when the
    heads cover part of the vocabulary) → the weights' path (checkpoint.write_checkpoint)."""
    c = head.config
    tensors = {}
    for i in range(c.num_heads):
        for j, layer in enumerate(head.blocks[i]):
            tensors[f"blocks.{i}.layers.{j}.weight"] = layer.weight.detach().to(dtype).contiguous()
            tensors[f"blocks.{i}.layers.{j}.bias"] = layer.bias.detach().to(dtype).contiguous()
        tensors[f"lm_heads.{i}.weight"] = head.lm_heads[i].weight.detach().to(dtype).contiguous()
    if c.draft_vocab_size != c.vocab_size:
        tensors["token_map"] = head.token_map.detach().to(torch.long).contiguous()
    return write_checkpoint(directory, tensors, c.to_json())


def _our_names(tensors: dict[str, torch.Tensor], num_layers: int, weights: Path) -> dict[str, torch.Tensor]:
    """Either layout → MedusaHead's state-dict names (``blocks.i.j.weight``, ``lm_heads.i.weight``)."""
    out = {}
    for name, t in tensors.items():
        for prefix in _PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix):]
        if name == "token_map":
            out[name] = t
        elif m := _VLLM_BLOCK.fullmatch(name) or _FD_BLOCK.fullmatch(name):
            out[f"blocks.{m[1]}.{m[2]}.{m[3]}"] = t
        elif m := _VLLM_LM.fullmatch(name):
            out[f"lm_heads.{m[1]}.weight"] = t
        elif (m := _FD_LM.fullmatch(name)) and int(m[2]) == num_layers:
            out[f"lm_heads.{m[1]}.weight"] = t
        elif name in ("lm_head.weight",):  # vLLM's original_lm_head: one map shared by all heads
            out["lm_heads.shared.weight"] = t
        else:
            raise HeadError(f"tensor {name} is not part of a Medusa-1 head with {num_layers} layer(s) per head",
                            file=str(weights), hint="config.json and the weights do not belong together, "
                            "or this is another kind of checkpoint")
    return out


def _int(raw: dict, keys: tuple[str, ...], path: Path, default: int | None = None) -> int | None:
    for key in keys:
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise HeadError(f"config.json has {key} = {value!r}; it must be a positive integer",
                                file=str(path), hint="download the head again")
            return value
    return default
