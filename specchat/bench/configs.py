"""What a benchmark compares: (runner, method, γ) configurations, parsed from the CLI;
and where its results go (``--out``: checked before the run, never lost after it)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from specchat.config.model import MAX_SPECULATIVE_TOKENS, parse_gamma
from specchat.errors import SpecchatError
from specchat.methods import METHODS, SPELLINGS

T = TypeVar("T")
WARMUP_TOKENS = 8  # each configuration's untimed warm-up call, before its timed requests: new tokens


def check_out_dir(out_dir: Path) -> None:
    """Before a run: ``--out`` can become a folder to write in (a SpecchatError, one line,
    if not), so a long run never ends on a path it cannot write. Nothing is created."""
    where = out_dir if out_dir.exists() else next((p for p in out_dir.parents if p.exists()), Path("."))
    if not where.is_dir():
        raise SpecchatError(f"--out {out_dir}: {where} is a file, not a folder", key="--out",
                            hint="give a folder (new or existing) for results.json and report.md")
    if not os.access(where, os.W_OK | os.X_OK):
        raise SpecchatError(f"--out {out_dir}: {where} is not writable", key="--out",
                            hint="give a folder you can write in")


def written(out_dir: Path, write: Callable[[Path], T]) -> T:
    """``write(out_dir)``. Where that fails after all (a full disk, a folder gone), the
    results go to a new temporary folder and a SpecchatError says where: a run's results
    are never lost; if even that fails, the one line says so, with both reasons."""
    try:
        return write(out_dir)
    except OSError as error:
        first = f"cannot write the results to {out_dir} ({error.strerror or error})"
    try:
        kept = Path(tempfile.mkdtemp(prefix="specchat-bench-"))
        write(kept)
    except OSError as error:
        raise SpecchatError(f"{first}, nor to a temporary folder ({error.strerror or error})", key="--out",
                            hint="free some space, or give --out a folder on another disk") from None
    raise SpecchatError(f"{first}; they are in {kept}", key="--out")


@dataclass(frozen=True)
class BenchConfig:
    """method: a name in specchat.methods ("none": plain decoding through the same engine);
    gamma: drafts per step or "auto"; runner: "specchat", "peer" or "single" (concurrency's
    one-sequence engine). The rest: docs/design/bench.md, "Configurations"."""

    method: str
    gamma: int | str = 0
    runner: str = "specchat"
    model: str | None = None
    server: bool = False
    spec_type: str = ""
    store: bool = False
    kernels: str = ""  # a llama-cpp-python peer row's: this process's llama.cpp kernels (KERNELS); "" unsaid

    @property
    def on_server(self) -> bool:
        """llama-server runs this row: its plain, -md and n-gram rows, and peer:eagle3."""
        return self.server or (self.runner == "peer" and self.method == "eagle3")

    @property
    def name(self) -> str:
        if self.server:
            gamma = f" γ={self.gamma}" if self.method == "draft_model" and self.gamma != "auto" else ""
            return f"peer:{self.spec_type or self.method}{gamma}{SERVER}"
        kernels = ran_kernels(self, self.kernels) if self.runner == "peer" else None
        said = ([Path(self.model).name] if self.model else []) + ([KERNELS[kernels]] if kernels else [])
        told = f" ({', '.join(said)})" if said else ""
        if self.method == "none":
            return "none" if self.runner == "specchat" else f"peer:none{told}"
        prefix = "peer:" if self.runner == "peer" else ""
        return f"{prefix}{self.method} γ={self.gamma}" + (" +store" if self.store else "") + told

    def to_dict(self) -> dict:
        return {"name": self.name, "method": self.method, "gamma": self.gamma, "runner": self.runner,
                "model": self.model, "server": self.server, "spec_type": self.spec_type, "store": self.store}


# whose llama.cpp kernels a row ran: our patched ones (patches/llama.cpp) or llama.cpp's own
KERNELS = {"specchat": "specchat's kernels", "stock": "stock kernels"}
SERVER = " (llama-server, stock kernels)"  # ends the name of every llama-server row (ran_kernels)
# the plain peer row's names: transformers' (no kernels), llama-cpp-python's (this process's kernels)
PLAIN_PEERS = ("peer:none", *(f"peer:none ({words})" for words in KERNELS.values()))


def ran_kernels(config: BenchConfig, here: str | None) -> str | None:
    """Whose llama.cpp kernels a row of ``config`` runs: llama-server's rows run stock ones,
    whatever its build (start_server sets SPECCHAT_GGML_UPSTREAM=1); every other row runs
    in this process, on ``here``'s ("specchat" or "stock"; None off llama.cpp)."""
    return "stock" if config.on_server else here


def process_kernels(loaded: Any) -> str | None:
    """Whose llama.cpp kernels this process runs (ours, and llama-cpp-python's peer rows in it):
    "specchat" (patches/llama.cpp), "stock" (an unpatched build, or SPECCHAT_GGML_UPSTREAM set);
    None for a transformers target. Read from what the loader found (loading/llamacpp.py)."""
    kernel = ((loaded.info or {}).get("target") or {}).get("llama_cpp_kernel")
    return None if kernel is None else "specchat" if kernel == "specchat" else "stock"


def parse_gammas(text: str) -> list[int | str]:
    parts = [p.strip() for p in text.split(",")]
    for part in (p for p in parts if parse_gamma(p) is None):
        raise SpecchatError(f"--gamma value {part!r} is not valid", key="--gamma",
                            hint=f'give a comma-separated list of integers 1..{MAX_SPECULATIVE_TOKENS} and/or "auto"')
    return list(dict.fromkeys(parse_gamma(p) for p in parts))


def parse_methods(text: str) -> list[str]:
    """``--methods``: names or aliases (``draft``) → the methods' names, once each."""
    parts = [p.strip() for p in text.split(",")]
    for part in (p for p in parts if p not in SPELLINGS):
        raise SpecchatError(f"--methods value {part!r} is not valid", key="--methods",
                            hint="use a comma-separated list of " + ", ".join(SPELLINGS))
    return list(dict.fromkeys(SPELLINGS[p].name for p in parts))


def loaded_methods(methods: list[str], has_draft: bool, has_head: bool, medusa_heads: int, note=print) -> list[str]:
    """``methods`` without those whose model the profile did not load, each noted."""
    kept = []
    for method in methods:
        needs = METHODS[method].needs
        if not {"draft": has_draft, "eagle3": has_head, "medusa": medusa_heads}.get(needs, True):
            rows = [m for m in METHODS.values() if m.needs == needs]  # the first is the one titled by it
            note(f"bench: the profile has no {rows[0].title}; skipping method '{method}' (use a profile with "
                 "speculation.method = " + " or ".join(f'"{m.name}"' for m in rows) + ")")
            continue
        kept.append(method)
    return kept


def default_configs(method: str, gamma: int | str, peer: bool, peer_models: tuple[str, ...] = (),
                    suffix_store: bool = False, kernels: str = "") -> list[BenchConfig]:
    """``bench`` without ``--grid``, ``--gamma`` or ``--methods``: "does what my profile runs
    pay here?" in minutes. Plain, the profile's method at its γ, and the plain peer rows
    (``kernels``: a llama-cpp-python peer's, this process's; "" for transformers)."""
    configs = [BenchConfig("none")]
    if method != "none":
        gamma = "auto" if METHODS[method].auto_only else gamma
        configs.append(BenchConfig(method, gamma))
        configs += [BenchConfig(method, gamma, store=True)] if suffix_store and method == "suffix" else []
    if peer:
        configs += [BenchConfig("none", 0, "peer", kernels=kernels),
                    *(BenchConfig("none", 0, "peer", m, kernels=kernels) for m in peer_models)]
    return configs


def build_configs(methods: list[str], gammas: list[int | str], has_draft: bool, peer: bool,
                  note=print, peer_methods: tuple[str, ...] = ("none", "draft_model", "ngram"),
                  peer_models: tuple[str, ...] = (), has_head: bool = False,
                  server_peer: bool = False, medusa_heads: int = 0,
                  server_ngram_types: tuple[str, ...] = (), suffix_store: bool = False,
                  server_draft: int = 0, kernels: str = "") -> list[BenchConfig]:
    """The plain baseline first (every speed-up is relative to it), then each method × γ;
    with ``peer``, the peer engine's rows for the methods it has (``peer_methods``; on
    ``kernels``, as default_configs) and the llama-server rows asked for (``server_*``;
    ``server_draft``: our γ ceiling for ``-md``)."""
    if suffix_store and "suffix" not in methods:
        raise SpecchatError("--suffix-store adds rows to suffix decoding's", key="--suffix-store",
                            hint="add suffix to --methods (e.g. --methods suffix,ngram,none)")
    configs = [BenchConfig("none")]
    for method in loaded_methods(methods, has_draft, has_head, medusa_heads, note):
        if method == "none":
            continue
        if method == "medusa":  # a head drafts one token: γ past the heads would run fewer
            deep = [g for g in gammas if g != "auto" and g > medusa_heads]
            if deep:
                note(f"bench: the profile has {medusa_heads} Medusa heads; skipping medusa γ = "
                     + ", ".join(str(g) for g in deep))
            configs += [BenchConfig(method, g) for g in gammas if g not in deep]
            continue
        if METHODS[method].auto_only:  # its controller picks source and γ each step: auto only
            configs.append(BenchConfig(method, "auto"))
            continue
        configs += [BenchConfig(method, gamma) for gamma in gammas]
        configs += [BenchConfig(method, gamma, store=True) for gamma in gammas if suffix_store and method == "suffix"]
    if peer:
        ours = list(configs)
        configs += [BenchConfig("none", 0, "peer", kernels=kernels)] if "none" in peer_methods else []
        configs += [BenchConfig("none", 0, "peer", model, kernels=kernels) for model in peer_models]
        configs += [BenchConfig("none", 0, "peer", server=True)] if server_peer else []
        if server_peer and any(c.method == "ngram" for c in ours):
            configs += [BenchConfig("ngram", "auto", "peer", server=True, spec_type=t) for t in server_ngram_types]
        if server_peer and server_draft and any(c.method == "draft_model" for c in ours):
            configs += [BenchConfig("draft_model", g, "peer", server=True) for g in ("auto", server_draft)]
        for method in sorted({c.method for c in ours if c.method != "none"} - set(peer_methods)):
            note(f"bench: the peer engine has no '{method}' speculation; no peer row for it")
        configs += [BenchConfig(c.method, c.gamma, "peer", kernels=kernels) for c in ours
                    if c.method != "none" and c.method in peer_methods]
    return configs
