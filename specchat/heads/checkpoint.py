"""Reading and writing EAGLE-3 heads: ``config.json`` + ``model.safetensors``, never pickle,
checked against the target (a :class:`HeadError` line per problem). Read: SpecForge's
``midlayer.*`` and vLLM's / speculators' ``layers.0.*`` layouts (docs/design/heads.md).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from specchat import untrusted
from specchat.errors import ModelLoadError
from specchat.heads.eagle3 import Eagle3Config, Eagle3Head

WEIGHTS = "model.safetensors"


class HeadError(ModelLoadError):
    """A head that cannot be used with this target."""


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


def write_checkpoint(directory: str | Path, tensors: dict[str, torch.Tensor], config: dict) -> Path:
    """Writes ``tensors`` and config.json into ``directory``, each under a temporary name then
    renamed (never half-written under the real name) → the weights' path."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (WEIGHTS + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(directory / WEIGHTS)
    tmp_config = directory / "config.json.tmp"
    tmp_config.write_text(json.dumps(config, indent=2) + "\n")
    tmp_config.replace(directory / "config.json")
    return directory / WEIGHTS


# Per kind: what a folder of it is called, and what to say of a folder of no kind (message, hint).
_KINDS = {"eagle3": ("an EAGLE-3 head", "not an EAGLE-3 head (config.json has no draft_vocab_size)",
                     "give a LlamaForCausalLMEagle3 / Eagle3LlamaForCausalLM checkpoint"),
          "medusa": ("a Medusa checkpoint", "not a Medusa head (config.json has no medusa_num_heads)",
                     "give a Medusa-1 checkpoint (FasterDecoding/Medusa or vLLM's MedusaModel)")}


def read_config(directory: Path, kind: str) -> dict:
    """``directory``'s config.json, which must be a ``kind`` ("eagle3" or "medusa") head's."""
    path = directory / "config.json"
    try:
        config = untrusted.json_value(untrusted.read_text(path))
    except FileNotFoundError:
        raise HeadError("no config.json: not a head checkpoint folder", file=str(directory),
                        hint="give the folder that holds config.json and model.safetensors") from None
    except (OSError, untrusted.Unreadable) as e:
        raise HeadError(f"config.json cannot be read ({e})", file=str(path), hint="download the head again") from None
    if not isinstance(config, dict):
        raise HeadError("config.json is not a JSON object", file=str(path), hint="download the head again")
    found = head_kind(config)
    if found != kind:
        name, message, hint = _KINDS[kind]
        if found in _KINDS:  # the other kind's checkpoint
            message, hint = f"this is {_KINDS[found][0]}, not {name}", f'set [speculation] method = "{found}" for it'
        raise HeadError(message, file=str(path), hint=hint)
    return config


def head_kind(config: dict) -> str:
    """"eagle3", "medusa" or "unknown", from the config alone."""
    archs = [str(a) for a in config.get("architectures") or []]
    if "medusa_num_heads" in config or any("medusa" in a.lower() for a in archs):
        return "medusa"
    if "draft_vocab_size" in config or any("eagle3" in a.lower() for a in archs):
        return "eagle3"
    return "unknown"


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


def weights_file(directory: Path) -> Path:
    """model.safetensors, or the folder's one other .safetensors file; pickle is refused."""
    path = directory / WEIGHTS
    if path.is_file():
        return path
    found = sorted(directory.glob("*.safetensors"))
    if len(found) == 1:
        return found[0]
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl"))
    raise HeadError(f"no {WEIGHTS} beside config.json" + (f" (found {', '.join(pickles)})" if pickles else ""),
                    file=str(directory), hint="heads are loaded from one safetensors file only, never from "
                    "pickle (.bin/.pt) files, which can run code: convert it with safetensors first")


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise HeadError(f"the weights file is damaged or not safetensors ({str(e).splitlines()[0][:120]})",
                        file=str(path), hint="delete it and download or train the head again") from None


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


def load_eagle3(directory: str | Path, *, target_hidden: int, target_vocab: int, target_layers: int,
                embed: torch.Tensor | None = None, dtype: torch.dtype = torch.float32) -> Eagle3Head:
    """The head in ``directory``, checked against the target (its hidden size, vocabulary
    and layer count); ``embed`` is the target's [V, H] token embedding."""
    directory = Path(directory)
    raw = read_config(directory, "eagle3")
    config_path = directory / "config.json"
    config = _config_from_json(raw, config_path)
    if not config.layer_ids:
        config = replace(config, layer_ids=(2, target_layers // 2, target_layers - 3))  # the engines' default
    mismatch = []
    if config.target_hidden_size != target_hidden:
        mismatch.append(f"target hidden size {config.target_hidden_size} ≠ the target's {target_hidden}")
    if config.vocab_size != target_vocab:
        mismatch.append(f"vocabulary {config.vocab_size} ≠ the target's {target_vocab}")
    bad_layers = [i for i in config.layer_ids if not 0 <= i < target_layers]
    if len(config.layer_ids) != 3 or bad_layers:
        mismatch.append(f"layer ids {list(config.layer_ids)} do not name 3 of the target's {target_layers} layers")
    if mismatch:
        raise HeadError("the head was built for another target: " + "; ".join(mismatch), file=str(config_path),
                        hint="use a head trained for this model (specchat train-head makes one)")
    weights = weights_file(directory)
    tensors = _normalise_names(_read_tensors(weights))
    embed = tensors.pop("embed_tokens.weight", embed)  # a head that carries its own uses it
    if embed is None or tuple(embed.shape) != (config.vocab_size, config.hidden_size):
        raise HeadError("the head needs the target's token embeddings [vocab, hidden]", file=str(directory),
                        hint="this target's backend cannot provide them; use another backend")
    head = Eagle3Head(config, embed.to(dtype))
    state = {}
    expected = dict(head.state_dict())
    for ours, theirs in NAMES.items():
        t = tensors.get(theirs)
        if t is None:
            raise HeadError(f"tensor {theirs} is missing", file=str(weights),
                            hint="the file is incomplete or another kind of checkpoint")
        if tuple(t.shape) != tuple(expected[ours].shape):
            raise HeadError(f"tensor {theirs} has shape {list(t.shape)}, config.json implies "
                            f"{list(expected[ours].shape)}", file=str(weights),
                            hint="config.json and the weights do not belong together")
        state[ours] = t.to(dtype)
    d2t = tensors.get("d2t", torch.zeros(config.draft_vocab_size)).to(torch.long)  # none: a full-vocabulary head
    ids = torch.arange(config.draft_vocab_size) + d2t if d2t.numel() == config.draft_vocab_size else None
    if ids is None or int(ids.min()) < 0 or int(ids.max()) >= config.vocab_size or ids.unique().numel() != ids.numel():
        raise HeadError("d2t does not map the draft vocabulary one-to-one into the target's",
                        file=str(weights), hint="the head is damaged or for another tokenizer")
    state["d2t"] = d2t
    head.load_state_dict(state)
    return head.eval()
