"""What every head kind shares: the :class:`Head` protocol the generic loader reads
(loading/heads.py), config.json and one safetensors file read as untrusted input (never
pickle), a :class:`HeadError` line per problem, and atomic writing (docs/design/heads.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specchat import untrusted
from specchat.errors import ModelLoadError
from specchat.methods import METHODS, named

WEIGHTS = "model.safetensors"


class HeadError(ModelLoadError):
    """A head that cannot be used with this target."""


class Head(nn.Module):
    """A draft head as the generic loader (loading/heads.py) reads it, declared, never probed;
    each kind adds the classmethod ``load(directory, target)``: its checkpoint, checked against
    the target (a Backend), or a HeadError line."""

    kind = ""  # its rows' ``needs``
    reads = "features"  # of the target: "features" (layer inputs) or "final_hidden" (the last layer's output)
    title = ""  # what a folder of it is called ("an EAGLE-3 head")
    # its config.json recognised alone: a lower-case part of an ``architectures`` name (which wins),
    # else a key only its kind has; and the (message, hint) for a config of no known kind
    architecture = config_key = ""
    unrecognised = ("", "")

    def check(self, speculation: Any) -> None:
        """Refuses (ModelLoadError) a [speculation] table its shape cannot serve."""

    def describe(self) -> dict:
        """What the loader records of it beside its source and size."""
        return {"kind": self.kind}


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


def read_config(directory: Path, head: type[Head]) -> dict:
    """``directory``'s config.json, which must be a ``head`` kind's."""
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
    found = kind_of(config)
    if found is not head:
        message, hint = head.unrecognised
        if found is not None:  # another kind's checkpoint
            message = f"this is {found.title}, not {head.title}"
            hint = f'set [speculation] method = "{found.kind}" for it'
        raise HeadError(message, file=str(path), hint=hint)
    return config


def kind_of(config: dict) -> type[Head] | None:
    """The head class (of those the table of methods names) a config.json is, from it alone."""
    kinds = list(dict.fromkeys(named(m.head) for m in METHODS.values() if m.head))
    archs = config.get("architectures")
    archs = [str(a).lower() for a in archs] if isinstance(archs, list) else []
    return (next((k for k in kinds if k.architecture and any(k.architecture in a for a in archs)), None)
            or next((k for k in kinds if k.config_key in config), None))


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


def take(tensors: dict[str, torch.Tensor], name: str, want: torch.Tensor, weights: Path,
         missing: str = "", hint: str = "the file is incomplete or another kind of checkpoint") -> torch.Tensor:
    """``tensors``' ``name``, removed, in float32 and shaped as ``want``, or a HeadError line."""
    t = tensors.pop(name, None)
    if t is None:
        raise HeadError(f"tensor {name} is missing{missing}", file=str(weights), hint=hint)
    if tuple(t.shape) != tuple(want.shape):
        raise HeadError(f"tensor {name} has shape {list(t.shape)}, config.json implies {list(want.shape)}",
                        file=str(weights), hint="config.json and the weights do not belong together")
    return t.to(torch.float32)


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise HeadError(f"the weights file is damaged or not safetensors ({str(e).splitlines()[0][:120]})",
                        file=str(path), hint="delete it and download or train the head again") from None


