"""dtype = "auto" on a CPU: bfloat16 where the CPU computes it natively, float32 elsewhere —
decided from the CPU's feature flags, reported with its reason wherever models are described."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specchat.config import load_profile
from specchat.config.model import ModelSpec
from specchat.loading import cpu_features, devices, load_models
from specchat.loading.cpu_features import cpu_native_bf16, flags_from_cpuinfo
from tests.support.tiny_models import write_tiny_profile

EPYC_GENOA = "fpu vme de pse tsc msr avx2 avx512f avx512dq avx512bw avx512_vnni avx512_bf16 avx512_vbmi2"
ICELAKE = "fpu vme avx2 avx512f avx512dq avx512bw avx512_vnni avx512_vbmi2"  # AVX-512, no BF16
SAPPHIRE_RAPIDS = "fpu avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8"
GRAVITON3 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm bf16 i8mm sve"
GRAVITON2 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp"


@pytest.mark.parametrize("machine, flags, native, named", [
    ("x86_64", EPYC_GENOA, True, "avx512_bf16"),
    ("x86_64", SAPPHIRE_RAPIDS, True, "amx_bf16"),  # AMX named first: it is the faster path
    ("AMD64", EPYC_GENOA, True, "avx512_bf16"),     # Windows spells the machine this way
    ("x86_64", ICELAKE, False, "no amx_bf16 or avx512_bf16"),
    ("x86_64", "", False, "no amx_bf16 or avx512_bf16"),
    ("aarch64", GRAVITON3, True, "bf16 in"),
    ("aarch64", GRAVITON2, False, "no bf16"),
    ("arm64", "bf16", True, "Arm BF16"),            # macOS: sysctl FEAT_BF16 = 1 (M2 and later)
    ("arm64", "", False, "no bf16"),                # M1: the key reads 0
    ("x86_64", None, False, "could not read"),
    ("riscv64", "rv64imafdc", False, "no known bf16 feature flag"),
])
def test_cpu_native_bf16_follows_the_feature_flags(machine, flags, native, named):
    got, reason = cpu_native_bf16(machine, flags, "/proc/cpuinfo", capability="AVX512")
    assert got is native, reason
    assert named in reason, reason
    assert "torch CPU capability AVX512" in reason  # the hint is reported, not decisive


def test_the_flags_line_decides_not_the_model_name():
    cpuinfo = ("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
               "model name\t: AMD EPYC 9R14 96-Core Processor with avx512_bf16 marketing\n"
               f"flags\t\t: {ICELAKE}\n\nprocessor\t: 1\nflags\t\t: {ICELAKE}\n")
    flags = flags_from_cpuinfo(cpuinfo)
    assert flags == ICELAKE
    assert cpu_native_bf16("x86_64", flags, "/proc/cpuinfo")[0] is False
    arm = f"processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: {GRAVITON3}\nCPU implementer\t: 0x41\n"
    assert cpu_native_bf16("aarch64", flags_from_cpuinfo(arm), "/proc/cpuinfo")[0] is True
    assert flags_from_cpuinfo("processor : 0\nmodel name : x\n") is None


def test_detection_on_this_machine_agrees_with_proc_cpuinfo():
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        pytest.skip("no /proc/cpuinfo here")
    words = set((flags_from_cpuinfo(cpuinfo.read_text()) or "").split())
    native, reason = cpu_features.detect_cpu_bf16()
    import platform
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert native == bool(words & {"avx512_bf16", "amx_bf16"}), reason
    assert torch.backends.cpu.get_cpu_capability() in reason


@pytest.mark.parametrize("native, want", [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_dtype_on_cpu_follows_the_detection(monkeypatch, native, want):
    monkeypatch.setattr(devices, "detect_cpu_bf16", lambda: (native, "the fake CPU says so"))
    dtype, reason = devices.resolve_dtype(ModelSpec(source="x"), "cpu")
    assert dtype == want and reason == "auto: the fake CPU says so"
    dtype, reason = devices.resolve_dtype(ModelSpec(source="x", dtype="float32"), "cpu")
    assert dtype == torch.float32 and reason == "set in the profile"


def test_loaded_info_says_which_dtype_and_why(monkeypatch, tmp_path, tiny_model_dir, tiny_draft_dir):
    monkeypatch.setattr(devices, "detect_cpu_bf16", lambda: (True, "the CPU computes bf16 natively (fake)"))
    path = write_tiny_profile(tmp_path / "auto.toml", tiny_model_dir, tiny_draft_dir, dtype="auto")
    loaded = load_models(load_profile(path))
    assert loaded.target.model.dtype == torch.bfloat16 and loaded.draft.model.dtype == torch.bfloat16  # drafts too
    info = loaded.info
    assert info["target"]["dtype"] == "bfloat16"
    assert info["target"]["dtype_reason"] == "auto: the CPU computes bf16 natively (fake)"
    packed = " (oneDNN-packed linears)" if info["target"]["packed_linears"] else ""
    assert info["precision"] == f"target and draft bfloat16{packed} — auto: the CPU computes bf16 natively (fake)"
    monkeypatch.setattr(devices, "detect_cpu_bf16", lambda: (False, "no native bf16 (fake)"))
    loaded = load_models(load_profile(path))
    assert loaded.target.model.dtype == torch.float32
    ratio = loaded.info["target"]["memory_bytes"] / info["target"]["memory_bytes"]
    assert 1.9 < ratio <= 2.0  # float32 weights are twice bf16 (small float32 buffers aside)


def test_precision_line_names_each_model_when_they_differ():
    from specchat.loading.models import describe_precision

    target = {"dtype": "bfloat16", "dtype_reason": "auto: native", "quantization": "4bit-nf4"}
    draft = {"dtype": "float32", "dtype_reason": "set in the profile", "quantization": "none"}
    assert describe_precision(target, draft) == ("target 4bit-nf4 computing in bfloat16 — auto: native; "
                                                  "draft float32 — set in the profile")
    assert describe_precision(draft, None) == "target float32 — set in the profile"
