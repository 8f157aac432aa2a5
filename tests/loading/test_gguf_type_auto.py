"""gguf_type = "auto": the default profile's conversion follows the CPU's own bf16 flags."""

from specchat.config import load_profile
from specchat.loading.cpu_features import cpu_native_bf16
from specchat.loading.llamacpp import resolve_gguf_type

AVX2 = "fpu sse2 avx avx2 fma"
AVX512_BF16 = AVX2 + " avx512f avx512_bf16"


def test_auto_is_bf16_only_where_the_cpu_computes_it_natively():
    native = cpu_native_bf16("x86_64", AVX512_BF16, "/proc/cpuinfo")
    emulated = cpu_native_bf16("x86_64", AVX2, "/proc/cpuinfo")
    assert resolve_gguf_type("auto", 0, native)[0] == "BF16"
    chosen, reason = resolve_gguf_type("auto", 0, emulated)
    assert chosen == "F16" and "no native bf16" in reason


def test_auto_is_f16_when_layers_go_to_a_gpu():
    native = cpu_native_bf16("x86_64", AVX512_BF16, "/proc/cpuinfo")
    assert resolve_gguf_type("auto", 32, native)[0] == "F16"


def test_a_named_type_or_none_passes_through():
    assert resolve_gguf_type("BF16") == ("BF16", "")
    assert resolve_gguf_type("Q8_0", 5) == ("Q8_0", "")
    assert resolve_gguf_type(None) == (None, "")


def test_the_default_profile_asks_for_auto():
    assert load_profile("default").target.gguf_type == "auto"
