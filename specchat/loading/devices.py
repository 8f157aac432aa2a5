"""Device, dtype and quantisation choices for one ModelSpec."""

from __future__ import annotations

from ..config.model import ModelSpec
from ..errors import ModelLoadError
from .cpu_features import detect_cpu_bf16

# bitsandbytes runs NF4 / FP4 / int8 on CPU from this version on.
BNB_CPU_VERSION = "0.48"
CPU_4BIT_OUT_MULTIPLE = 32


def resolve_device(spec: ModelSpec, key: str) -> str:
    """"auto" → CUDA when present, else CPU; an explicit device must exist."""
    import torch

    if spec.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if spec.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelLoadError(f"device '{spec.device}' requested but CUDA is not available", key=f"{key}.device",
                                 hint="use device = \"auto\" or \"cpu\", or install a CUDA build of torch (see docs/guide.md)")
        index = int(spec.device.split(":")[1]) if ":" in spec.device else 0
        if index >= torch.cuda.device_count():
            raise ModelLoadError(f"device '{spec.device}' does not exist ({torch.cuda.device_count()} CUDA devices)",
                                 key=f"{key}.device", hint="use device = \"cuda\" or \"auto\"")
    if spec.device == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError("device 'mps' requested but not available", key=f"{key}.device",
                             hint="use device = \"auto\"")
    return spec.device


def resolve_dtype(spec: ModelSpec, device: str):
    """(torch dtype, why): "auto" → bfloat16 on CUDA (float16 without bf16); on a CPU
    bfloat16 where it is native (cpu_features), else float32 (emulated is slower)."""
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


def quantization_config(spec: ModelSpec, device: str, key: str, dtype):
    """A BitsAndBytesConfig for 8bit / 4bit-nf4 / 4bit-fp4 (4-bit layers compute in the
    model's ``dtype``), or None."""
    if spec.quantization == "none":
        return None
    if device != "cpu" and not device.startswith("cuda"):
        raise ModelLoadError(f"quantization '{spec.quantization}' does not run on device '{device}'",
                             key=f"{key}.quantization",
                             hint='bitsandbytes runs on CUDA and CPU: use device = "auto", "cuda" or "cpu"')
    try:
        _import_bitsandbytes()
    except ImportError:
        raise ModelLoadError(f"quantization '{spec.quantization}' needs the bitsandbytes package",
                             key=f"{key}.quantization", hint=f"pip install 'bitsandbytes>={BNB_CPU_VERSION}'") from None
    import bitsandbytes
    from packaging.version import Version
    from transformers import BitsAndBytesConfig

    if device == "cpu" and Version(bitsandbytes.__version__) < Version(BNB_CPU_VERSION):
        raise ModelLoadError(f"quantization '{spec.quantization}' on CPU needs bitsandbytes ≥ {BNB_CPU_VERSION}, "
                             f"this is {bitsandbytes.__version__}", key=f"{key}.quantization",
                             hint=f"pip install -U 'bitsandbytes>={BNB_CPU_VERSION}'")
    if spec.quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=spec.quantization.split("-")[1],  # "nf4" | "fp4"
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=dtype,
    )


def check_quantized_layers(model, device: str, key: str) -> None:
    """bitsandbytes' 4-bit CPU kernel needs inputs a multiple of the block (64) and outputs of
    32, else a shape error at the first token: said at load time instead, on every CPU alike."""
    if device != "cpu":
        return
    import bitsandbytes

    for name, module in model.named_modules():
        if not isinstance(module, bitsandbytes.nn.Linear4bit):
            continue
        state = getattr(module.weight, "quant_state", None)
        block = getattr(state, "blocksize", 64) or 64
        if module.in_features % block or module.out_features % CPU_4BIT_OUT_MULTIPLE:
            raise ModelLoadError(
                f"this model cannot be quantized to 4 bits on CPU: layer '{name}' is {module.in_features} → "
                f"{module.out_features}, and bitsandbytes needs inputs a multiple of {block} and outputs a multiple "
                f"of {CPU_4BIT_OUT_MULTIPLE}", key=f"{key}.quantization", hint='use quantization = "none" or "8bit"')


def _import_bitsandbytes() -> None:
    """Import bitsandbytes with its warnings (a missing optional "kernels" package, 8-bit
    inputs cast to float16) kept off the terminal: nothing a chat user can act on."""
    import logging

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    logging.getLogger("kernels").setLevel(logging.ERROR)  # kernels ≥ 0.19 warns offline that it skips a Hub check
    import bitsandbytes  # noqa: F401

