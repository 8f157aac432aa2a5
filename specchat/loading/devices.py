"""Device, dtype and quantisation choices for one ModelSpec."""

from __future__ import annotations

from ..config.model import ModelSpec
from ..errors import ModelLoadError
from .cpu_features import detect_cpu_bf16


def resolve_device(spec: ModelSpec, key: str) -> str:
    """"auto" → CUDA when present, else CPU; an explicit device must exist."""
    import torch

    if spec.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelLoadError(f"device '{spec.device}' requested but CUDA is not available", key=f"{key}.device",
                                 hint="use device = \"auto\" or \"cpu\", or install a CUDA build of torch (see README)")
        index = int(spec.device.split(":")[1]) if ":" in spec.device else 0
        if index >= torch.cuda.device_count():
            raise ModelLoadError(f"device '{spec.device}' does not exist ({torch.cuda.device_count()} CUDA devices)",
                                 key=f"{key}.device", hint="use device = \"cuda\" or \"auto\"")
    if spec.device == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError("device 'mps' requested but not available", key=f"{key}.device",
                             hint="use device = \"auto\"")
    return spec.device


def resolve_dtype(spec: ModelSpec, device: str):
    """(torch dtype, why) for one model.

    "auto" → bfloat16 on CUDA (float16 on GPUs without bf16); on a CPU bfloat16 where
    it computes bf16 natively (cpu_features: about 2× float32 for a small model), else
    float32, because emulated half precision is slower than float32.
    """
    import torch

    if spec.dtype != "auto":
        return getattr(torch, spec.dtype), "set in the profile"
    if device.startswith("cuda"):
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16, "auto: CUDA with bf16 support"
        return torch.float16, "auto: this GPU has no bf16, so float16"
    if device == "cpu":
        native, why = detect_cpu_bf16()
        return (torch.bfloat16 if native else torch.float32), f"auto: {why}"
    return torch.float32, f"auto: float32 on {device}"


def quantization_config(spec: ModelSpec, device: str, key: str):
    """A BitsAndBytesConfig for 8bit / 4bit-nf4 / 4bit-fp4, or None."""
    if spec.quantization == "none":
        return None
    if not device.startswith("cuda"):
        raise ModelLoadError(f"quantization '{spec.quantization}' needs a CUDA GPU, and this machine has none",
                             key=f"{key}.quantization",
                             hint="bitsandbytes 4/8-bit runs on CUDA here: set quantization = \"none\" "
                                  "(and a smaller model), or use a machine with an NVIDIA GPU")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise ModelLoadError(f"quantization '{spec.quantization}' needs the bitsandbytes package",
                             key=f"{key}.quantization", hint="pip install bitsandbytes") from None
    import torch
    from transformers import BitsAndBytesConfig

    if spec.quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=spec.quantization.split("-")[1],  # "nf4" | "fp4"
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute,
    )
