"""Finding and loading a profile's draft head (a folder, a Hub repo of which only config.json
and *.safetensors are fetched: a head is data, never code, or ``embedded:<name>``)."""

from __future__ import annotations

from pathlib import Path

from specchat.errors import ModelLoadError
from specchat.methods import METHODS, named

EMBEDDED = "embedded:"
SHIPPED = Path(__file__).resolve().parent.parent / "heads" / "shipped"


def shipped_heads() -> list[str]:
    return sorted(p.name for p in SHIPPED.iterdir() if (p / "config.json").is_file()) if SHIPPED.is_dir() else []


def resolve_head(head: str, revision: str | None, base: Path | None, offline: bool = False) -> Path:
    """The local folder holding the head's config.json and weights (``offline``: a Hub
    head from the cache alone)."""
    if head.startswith(EMBEDDED):
        name = head[len(EMBEDDED):]
        folder = SHIPPED / name
        if not (folder / "config.json").is_file():
            known = ", ".join(f"'{EMBEDDED}{n}'" for n in shipped_heads()) or "none in this install"
            raise ModelLoadError(f"no shipped head named {name!r}", key="speculation.head", hint=f"shipped: {known}")
        return folder
    local = Path(head).expanduser()
    if not local.is_absolute() and base is not None:
        local = base / local
    if local.exists() or head.startswith((".", "/", "~")) or head.count("/") != 1:
        if not local.is_dir():
            raise ModelLoadError(f"head folder {str(local)!r} does not exist", key="speculation.head",
                                 hint="give the folder holding config.json and model.safetensors, or a Hub id org/name")
        return local
    from .hub_errors import from_hub

    return from_hub(head, revision, "speculation.head", "head", patterns=["config.json", "*.safetensors"],
                    offline=offline)


def load_head(spec, target, base: Path | None):
    """The profile's head for ``target`` (a Backend), of the class its method's row names; one-line
    errors for a target that cannot hand out what the head reads and for a head that does not fit it."""
    head_class = named(METHODS[spec.method].head)
    if head_class.reads == "final_hidden" and not target.provides_final_hidden:
        raise ModelLoadError(f"method '{spec.method}' needs the target's final hidden states, and "
                             f"{target.final_hidden_note}", key="speculation.method",
                             hint='use method = "ngram" or "draft_model" with this target, or backend = "transformers"')
    if head_class.reads == "features" and not target.provides_features:
        raise ModelLoadError(f"method '{spec.method}' needs the target's hidden states, and {target.features_note}",
                             key="speculation.method", hint='use method = "ngram" or "draft_model" with this target')
    if spec.siblings > 1 and not target.supports_trees:  # siblings > 1 drafts a tree
        raise ModelLoadError(f"siblings = {spec.siblings} drafts a tree, and the {target.name} backend verifies "
                             "chains only", key="speculation.siblings",
                             hint="set siblings = 1, or use a transformers or llama.cpp target")
    if spec.siblings > (target.max_tree_leaves or spec.siblings):
        raise ModelLoadError(f"siblings = {spec.siblings}: the {target.name} backend verifies trees of at most "
                             f"{target.max_tree_leaves} leaves", key="speculation.siblings",
                             hint=f"set siblings to at most {target.max_tree_leaves}")
    folder = resolve_head(spec.head, spec.head_revision, base)
    head = head_class.load(folder, target)
    head.check(spec)
    head.folder = folder  # where it was read from (bench converts it for llama-server's peer row)
    return head
