"""An EAGLE-3 draft head (Li et al. 2025) in torch, in SpecForge's layout: ``fc`` fuses three
target layers' inputs into g_P; one decoder layer takes (embedding of token P+1, g_P) at
position P and predicts token P+2 over a draft vocabulary. Its checkpoints: SpecForge's
``midlayer.*`` and vLLM's / speculators' ``layers.0.*`` layouts read (docs/design/heads.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from specchat.heads.checkpoint import Head, HeadError, read_config, read_tensors, take, weights_file, write_checkpoint


@dataclass(frozen=True)
class Eagle3Config:
    """The head's shape. ``vocab_size`` is the target's; ``draft_vocab_size`` the head's."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    layer_ids: tuple[int, ...]
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192
    norm_before_residual: bool = False
    extra: dict = field(default_factory=dict, compare=False)  # other keys, kept on save

    @classmethod
    def for_target(cls, target: dict, layer_ids: tuple[int, ...], draft_vocab_size: int) -> Eagle3Config:
        """A head shaped like one layer of the target (its config.json as a dict)."""
        heads = target["num_attention_heads"]
        return cls(
            hidden_size=target["hidden_size"], intermediate_size=target["intermediate_size"],
            num_attention_heads=heads, num_key_value_heads=target.get("num_key_value_heads", heads),
            head_dim=target.get("head_dim") or target["hidden_size"] // heads, vocab_size=target["vocab_size"],
            draft_vocab_size=draft_vocab_size, target_hidden_size=target["hidden_size"], layer_ids=tuple(layer_ids),
            rms_norm_eps=target.get("rms_norm_eps", 1e-5), rope_theta=float(target.get("rope_theta", 10000.0)),
            max_position_embeddings=target.get("max_position_embeddings", 8192))

    def to_json(self) -> dict:
        return {  # the extra keys first, ours over them
            **self.extra, "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "num_hidden_layers": 1, "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size, "target_hidden_size": self.target_hidden_size,
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta, "rope_scaling": None,
            "max_position_embeddings": self.max_position_embeddings, "tie_word_embeddings": False,
            "attention_bias": False, "norm_before_residual": self.norm_before_residual,
            "torch_dtype": "bfloat16",
            # vLLM and llama.cpp read the top-level key, SpecForge's loaders the nested one
            "eagle_aux_hidden_state_layer_ids": list(self.layer_ids),
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(self.layer_ids), "use_aux_hidden_state": True},
        }


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps)).to(weight.dtype) * weight


def rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Llama's rotate-half RoPE. x: [..., T, d]; positions: [T]; inv_freq: [d/2]."""
    d = x.shape[-1]
    angles = positions.to(torch.float32)[:, None] * inv_freq[None]  # [T, d/2]
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(x.dtype)  # [T, d]
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(x.dtype)
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class Eagle3Head(Head):
    """The head's weights and its one decoder layer. ``embed`` is the target's token
    embedding matrix [V, H] (a buffer, not saved)."""

    kind, reads, title = "eagle3", "features", "an EAGLE-3 head"  # heads/checkpoint.py's Head says what each is
    architecture, config_key = "eagle3", "draft_vocab_size"
    unrecognised = ("not an EAGLE-3 head (config.json has no draft_vocab_size)",
                    "give a LlamaForCausalLMEagle3 / Eagle3LlamaForCausalLM checkpoint")

    def __init__(self, config: Eagle3Config, embed: torch.Tensor | None = None) -> None:
        super().__init__()
        c = self.config = config
        h, n_q, n_kv, hd = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.fc = nn.Linear(len(c.layer_ids) * c.target_hidden_size, h, bias=False)
        self.input_layernorm = nn.Parameter(torch.ones(h))
        self.hidden_norm = nn.Parameter(torch.ones(h))
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))
        self.q_proj = nn.Linear(2 * h, n_q * hd, bias=False)
        self.k_proj = nn.Linear(2 * h, n_kv * hd, bias=False)
        self.v_proj = nn.Linear(2 * h, n_kv * hd, bias=False)
        self.o_proj = nn.Linear(n_q * hd, h, bias=False)
        self.gate_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, h, bias=False)
        self.norm = nn.Parameter(torch.ones(h))
        self.lm_head = nn.Linear(h, c.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.long))
        self.register_buffer("embed", embed if embed is not None else torch.zeros(0, h), persistent=False)
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))  # [d/2]
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    # --- the pieces ---------------------------------------------------------------------
    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """features [T, 3·H_target] (low, mid, high concatenated) → g [T, H]."""
        return self.fc(features.to(self.norm.dtype))

    def draft_ids(self) -> torch.Tensor:
        """[V_draft] the target id of each draft id."""
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

    def qkv(self, tokens: torch.Tensor, g: torch.Tensor, positions: torch.Tensor):
        """tokens [..., T], g [..., T, H], positions [T] → (q [..., n_q, T, d], k, v [..., n_kv, T, d])."""
        c = self.config
        e = self.embed[tokens].to(g.dtype)
        x = torch.cat([rms_norm(e, self.input_layernorm, c.rms_norm_eps),
                       rms_norm(g, self.hidden_norm, c.rms_norm_eps)], -1)  # [..., T, 2H]
        shape = x.shape[:-1]

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:
            return t.view(*shape, n, c.head_dim).transpose(-2, -3)  # [..., n, T, d]

        q = rope(heads(self.q_proj(x), c.num_attention_heads), positions, self.inv_freq)
        k = rope(heads(self.k_proj(x), c.num_key_value_heads), positions, self.inv_freq)
        return q, k, heads(self.v_proj(x), c.num_key_value_heads)

    def finish(self, attended: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """attended [..., n_q, T, d], the layer's g input [..., T, H] → pre-norm output [..., T, H]."""
        c = self.config
        a = attended.transpose(-2, -3).reshape(*g.shape[:-1], c.num_attention_heads * c.head_dim)
        residual = rms_norm(g, self.hidden_norm, c.rms_norm_eps) if c.norm_before_residual else g
        h = self.o_proj(a) + residual
        m = rms_norm(h, self.post_attention_layernorm, c.rms_norm_eps)
        return h + self.down_proj(nn.functional.silu(self.gate_proj(m)) * self.up_proj(m))

    def logits(self, prenorm: torch.Tensor) -> torch.Tensor:
        """[..., H] → draft-vocabulary logits [..., V_draft]."""
        return self.lm_head(rms_norm(prenorm, self.norm, self.config.rms_norm_eps))

    def expand_kv(self, t: torch.Tensor) -> torch.Tensor:
        """[..., n_kv, T, d] → [..., n_q, T, d] (grouped-query attention)."""
        groups = self.config.num_attention_heads // self.config.num_key_value_heads
        return t if groups == 1 else t.repeat_interleave(groups, dim=-3)

    @classmethod
    def load(cls, directory: Path, target) -> Eagle3Head:
        """The head in ``directory``, checked against ``target``'s hidden size, vocabulary and
        layer count; the target's token embeddings unless the file has its own."""
        config_path = directory / "config.json"
        config = _config_from_json(read_config(directory, cls), config_path)
        hidden, vocab, layers = target.hidden_size, target.vocab_size, target.num_layers
        if not config.layer_ids:  # the engines' default
            config = replace(config, layer_ids=(2, layers // 2, layers - 3))
        mismatch = []
        if config.target_hidden_size != hidden:
            mismatch.append(f"target hidden size {config.target_hidden_size} ≠ the target's {hidden}")
        if config.vocab_size != vocab:
            mismatch.append(f"vocabulary {config.vocab_size} ≠ the target's {vocab}")
        bad_layers = [i for i in config.layer_ids if not 0 <= i < layers]
        if len(config.layer_ids) != 3 or bad_layers:
            mismatch.append(f"layer ids {list(config.layer_ids)} do not name 3 of the target's {layers} layers")
        if mismatch:
            raise HeadError("the head was built for another target: " + "; ".join(mismatch), file=str(config_path),
                            hint="use a head trained for this model (specchat train-head makes one)")
        weights = weights_file(directory)
        tensors = _normalise_names(read_tensors(weights))
        embed = tensors.pop("embed_tokens.weight", None)  # a head that carries its own uses it
        embed = target.token_embeddings() if embed is None else embed
        if tuple(embed.shape) != (config.vocab_size, config.hidden_size):
            raise HeadError("the head needs the target's token embeddings [vocab, hidden]", file=str(directory),
                            hint="this target's backend cannot provide them; use another backend")
        head = cls(config, embed.to(torch.float32))
        expected = dict(head.state_dict())
        state = {ours: take(tensors, theirs, expected[ours], weights) for ours, theirs in NAMES.items()}
        n = config.draft_vocab_size
        d2t = tensors.get("d2t", torch.zeros(n)).to(torch.long)  # none: a full-vocabulary head
        ids = torch.arange(n) + d2t if d2t.numel() == n else None
        if ids is None or int(ids.min()) < 0 or int(ids.max()) >= config.vocab_size or ids.unique().numel() != n:
            raise HeadError("d2t does not map the draft vocabulary one-to-one into the target's",
                            file=str(weights), hint="the head is damaged or for another tokenizer")
        state["d2t"] = d2t
        head.load_state_dict(state)
        return head.eval()

    def describe(self) -> dict:
        return {"draft_vocab": self.config.draft_vocab_size, "kind": self.kind,
                "layer_ids": list(self.config.layer_ids)}


# our attribute → the checkpoint's name (SpecForge layout)
NAMES = {
    "fc.weight": "fc.weight",
    **{norm: f"midlayer.{norm}.weight" for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm")},
    **{f"{p}.weight": f"midlayer.self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "o_proj")},
    **{f"{p}.weight": f"midlayer.mlp.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")},
    "norm": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}


def save_eagle3(head: Eagle3Head, directory: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Writes the head (weights in ``dtype``; d2t int64, t2d bool) → the weights' path."""
    state = dict(head.state_dict())
    tensors = {NAMES[ours]: state[ours].detach().to(dtype).contiguous() for ours in NAMES}
    tensors["d2t"] = head.d2t.detach().to(torch.long).contiguous()
    t2d = torch.zeros(head.config.vocab_size, dtype=torch.bool)
    t2d[head.draft_ids()] = True
    tensors["t2d"] = t2d
    return write_checkpoint(directory, tensors, head.config.to_json())


def _config_from_json(raw: dict, path: Path) -> Eagle3Config:
    raw = {**raw, **(raw.get("transformer_layer_config") or {})}  # speculators' nesting
    layer_ids = raw.get("eagle_aux_hidden_state_layer_ids") or (raw.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids")
    try:
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        if int(raw.get("num_hidden_layers", 1)) != 1:
            raise HeadError(f"num_hidden_layers is {raw['num_hidden_layers']}; an EAGLE-3 head has one layer",
                            file=str(path), hint="is this a draft model? use [speculation.draft] for those")
        return Eagle3Config(
            hidden_size=hidden, intermediate_size=int(raw["intermediate_size"]), num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads), vocab_size=int(raw["vocab_size"]),
            draft_vocab_size=int(raw.get("draft_vocab_size") or raw["vocab_size"]),
            target_hidden_size=int(raw.get("target_hidden_size") or hidden),
            layer_ids=tuple(int(i) for i in layer_ids) if layer_ids else (),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)), rope_theta=float(raw.get("rope_theta", 10000.0)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 8192)),
            norm_before_residual=bool(raw.get("norm_before_residual", False)))
    except (KeyError, TypeError, ValueError) as e:
        raise HeadError(f"config.json lacks or mangles {e}", file=str(path),
                        hint="an EAGLE-3 config names hidden_size, intermediate_size, num_attention_heads, "
                             "vocab_size and draft_vocab_size") from None


def _normalise_names(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in tensors.items():
        for prefix in ("model.layers.0.", "layers.0."):
            if name.startswith(prefix):
                name = "midlayer." + name[len(prefix):]
        if name.startswith("model.") and not name.startswith("model.layers"):
            name = name[len("model."):]
        out[name] = t
    return out
