"""bf16 linear layers on the CPU with their weights packed once for oneDNN: half a decode
step's linear time, bit-identical outputs. Design notes: docs/design/loading.md"""

from __future__ import annotations

import torch


class PackedLinear(torch.nn.Module):
    """``nn.Linear``'s forward on a weight packed for oneDNN (a buffer, not trainable)."""

    def __init__(self, linear: torch.nn.Linear, *, copies_shared_weight: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.copies_shared_weight = copies_shared_weight  # another module still holds the original
        with torch.no_grad():
            self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None),
                                 persistent=False)
            bias = linear.bias.detach() if linear.bias is not None else None
            self.register_buffer("bias", bias, persistent=False)

    @property
    def weight(self) -> torch.Tensor:
        """The weight as a plain [out, in] tensor (a copy: for reading, e.g. its dtype)."""
        return self.packed_weight.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad and torch.is_grad_enabled():  # the packed op has no backward (and is slow there)
            return torch.nn.functional.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed for oneDNN"


def packing_works(dtype: torch.dtype = torch.bfloat16) -> bool:
    """Whether this torch build packs linear weights and gives F.linear's exact output."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        gen = torch.Generator().manual_seed(0)
        linear = torch.nn.Linear(64, 48, dtype=dtype)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(48, 64, generator=gen))
        x = torch.randn(2, 3, 64, generator=gen).to(dtype)
        with torch.inference_mode():
            return bool(torch.equal(PackedLinear(linear)(x), linear(x)))
    except (RuntimeError, AttributeError, NotImplementedError):  # no mkldnn ops in this build
        return False


def pack_linears(model: torch.nn.Module) -> int:
    """Replaces the model's bf16 ``nn.Linear`` layers on the CPU by :class:`PackedLinear`;
    returns how many. Nothing is replaced where packing does not work in this build."""
    shared: dict[int, int] = {}
    for module in model.modules():
        for parameter in module.parameters(recurse=False):
            shared[id(parameter)] = shared.get(id(parameter), 0) + 1
    targets = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if type(child) is torch.nn.Linear and child.weight.dtype == torch.bfloat16
               and child.weight.device.type == "cpu"]
    if not targets or not packing_works():
        return 0
    for parent, name, child in targets:
        setattr(parent, name, PackedLinear(child, copies_shared_weight=shared[id(child.weight)] > 1))
    return len(targets)


def copied_bytes(model: torch.nn.Module) -> int:
    """Bytes the packed copies of shared (tied) weights add to the model's footprint."""
    return sum(m.packed_weight.numel() * m.packed_weight.element_size() for m in model.modules()
               if isinstance(m, PackedLinear) and m.copies_shared_weight)
