"""Random-weight models in the shapes of real ones, for ``specchat plan --synthetic``: a step's
time depends on shapes and formats, not weights. Design notes: docs/design/speedup.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from specchat.paths import cache_dir

FORMAT_VERSION = 1  # bump when the files' layout changes: the cache key holds it


@dataclass(frozen=True)
class Shape:
    """What llama.cpp needs of an architecture's hyper-parameters (its GGUF keys)."""

    name: str
    arch: str  # "qwen3" or "llama"
    hidden: int
    layers: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool  # the output projection is the token embedding
    rope_base: float
    quant: str  # "Q4_K_M" or "Q8_0"

    def tensors(self) -> list[tuple[str, tuple[int, int] | tuple[int], str]]:
        """(name, numpy shape (out, in), ggml type) of every tensor, in file order."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        mat = "Q8_0" if self.quant == "Q8_0" else "Q4_K"
        out = [("token_embd.weight", (self.vocab, h), mat)]
        for i in range(self.layers):
            more = self.quant == "Q4_K_M" and _more_bits(i, self.layers)
            big = "Q6_K" if more else mat
            out += [(f"blk.{i}.attn_norm.weight", (h,), "F32"), (f"blk.{i}.attn_q.weight", (q, h), mat),
                    (f"blk.{i}.attn_k.weight", (kv, h), mat), (f"blk.{i}.attn_v.weight", (kv, h), big),
                    (f"blk.{i}.attn_output.weight", (h, q), mat)]
            if self.arch == "qwen3":
                out += [(f"blk.{i}.attn_q_norm.weight", (self.head_dim,), "F32"),
                        (f"blk.{i}.attn_k_norm.weight", (self.head_dim,), "F32")]
            out += [(f"blk.{i}.ffn_norm.weight", (h,), "F32"), (f"blk.{i}.ffn_gate.weight", (self.ffn, h), mat),
                    (f"blk.{i}.ffn_up.weight", (self.ffn, h), mat), (f"blk.{i}.ffn_down.weight", (h, self.ffn), big)]
        out.append(("output_norm.weight", (h,), "F32"))
        if not self.tied:
            out.append(("output.weight", (self.vocab, h), "Q6_K" if self.quant == "Q4_K_M" else mat))
        return out

    def parameters(self) -> int:
        return sum(math.prod(shape) for _, shape, _ in self.tensors())

    def file_bytes(self) -> int:
        """The tensors' bytes in this format (the file adds its header)."""
        return sum(_nbytes(shape, kind) for _, shape, kind in self.tensors())


def _more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers and every third between."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


# (elements per block, bytes per block, byte offsets of the block's fp16 scales)
BLOCKS = {"Q8_0": (32, 34, (0,)), "Q4_K": (256, 144, (0, 2)), "Q6_K": (256, 210, (208,))}


def _nbytes(shape: tuple[int, ...], kind: str) -> int:
    if kind == "F32":
        return 4 * math.prod(shape)
    per, size, _ = BLOCKS[kind]
    return shape[0] * shape[1] // per * size


# the published configurations (config.json of each model on the Hugging Face Hub)
QWEN3_8B = Shape("Qwen3-8B", "qwen3", 4096, 36, 12288, 32, 8, 128, 151936, False, 1e6, "Q4_K_M")
QWEN3_06B = Shape("Qwen3-0.6B", "qwen3", 1024, 28, 3072, 16, 8, 128, 151936, True, 1e6, "Q8_0")
LLAMA31_8B = Shape("Llama-3.1-8B", "llama", 4096, 32, 14336, 32, 8, 128, 128256, False, 5e5, "Q4_K_M")
LLAMA32_1B = Shape("Llama-3.2-1B", "llama", 2048, 16, 8192, 32, 8, 64, 128256, True, 5e5, "Q8_0")
# small enough to build and time anywhere in seconds: a check of the path, not a model
TINY_QWEN3 = Shape("tiny-qwen3", "qwen3", 256, 4, 512, 4, 2, 64, 1024, False, 1e6, "Q4_K_M")
TINY_LLAMA = Shape("tiny-llama", "llama", 256, 2, 512, 4, 2, 64, 1024, True, 5e5, "Q8_0")
PAIRS = {"qwen3-8b": (QWEN3_8B, QWEN3_06B), "llama3.1-8b": (LLAMA31_8B, LLAMA32_1B), "tiny": (TINY_QWEN3, TINY_LLAMA)}


def transformers_model(shape: Shape, device: str, dtype: str = "bfloat16", nf4: bool = False):
    """The shape as a transformers model with random weights, made on ``device`` (its
    format is ``dtype``: a GGUF's quantisation has no meaning here); ``nf4``: then every
    linear layer but the output head quantised to 4-bit NF4 as bitsandbytes loads a
    ``quantization = "4bit-nf4"`` target (double quantisation, computing in ``dtype``)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    config = (Qwen3Config if shape.arch == "qwen3" else LlamaConfig)(
        hidden_size=shape.hidden, num_hidden_layers=shape.layers, intermediate_size=shape.ffn,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
        vocab_size=shape.vocab, tie_word_embeddings=shape.tied, rope_theta=shape.rope_base,
        max_position_embeddings=32768, bos_token_id=1, eos_token_id=2)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    return (_to_nf4(model, device, getattr(torch, dtype)) if nf4 else model).eval()


def _to_nf4(model, device: str, compute_dtype):
    """``model``'s linear layers (the output head kept, as transformers keeps it) replaced
    by bitsandbytes' 4-bit NF4 ones, layer by layer: the weights are quantised as each
    moves to ``device``, so memory holds one layer twice at most."""
    import torch

    from specchat.loading.devices import _import_bitsandbytes

    _import_bitsandbytes()
    import bitsandbytes as bnb

    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and child is not model.get_output_embeddings():
                layer = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                          compute_dtype=compute_dtype, compress_statistics=True, quant_type="nf4",
                                          device="meta")
                layer.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, compress_statistics=True,
                                                 quant_type="nf4")
                if child.bias is not None:
                    layer.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
                setattr(module, name, layer.to(device))
    return model


def build(shape: Shape, path: Path, seed: int = 0) -> Path:
    """Writes ``shape`` as a GGUF at ``path`` (tensor by tensor: memory stays one tensor)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    chunk = rng.integers(0, 256, size=1 << 20, dtype=np.uint8)  # random bytes, reused: values do not matter
    scale = np.frombuffer(np.float16(1e-3).tobytes(), dtype=np.uint8)
    writer = gguf.GGUFWriter(str(path), shape.arch)
    writer.add_name(f"synthetic {shape.name} {shape.quant} (random weights)")
    writer.add_context_length(32768)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(15 if shape.quant == "Q4_K_M" else 7)  # llama_ftype MOSTLY_Q4_K_M / MOSTLY_Q8_0
    writer.add_tokenizer_model("llama")
    writer.add_token_list([b"<unk>", b"<s>", b"</s>"] + [f"t{i}".encode() for i in range(3, shape.vocab)])
    writer.add_token_scores([0.0] * shape.vocab)
    writer.add_token_types([2, 3, 3] + [1] * (shape.vocab - 3))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    for name, dims, kind in shape.tensors():
        if kind == "F32":
            writer.add_tensor_info(name, dims, np.dtype(np.float32), _nbytes(dims, kind))
        else:
            per, size, _ = BLOCKS[kind]
            writer.add_tensor_info(name, (dims[0], dims[1] // per * size), np.dtype(np.uint8), _nbytes(dims, kind),
                                   raw_dtype=getattr(gguf.GGMLQuantizationType, kind))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, dims, kind in shape.tensors():
        if kind == "F32":
            writer.write_tensor_data(np.ones(dims, dtype=np.float32))
            continue
        per, size, scales = BLOCKS[kind]
        nbytes = _nbytes(dims, kind)
        data = np.resize(chunk, nbytes).reshape(-1, size)  # one row a block
        for offset in scales:
            data[:, offset:offset + 2] = scale
        writer.write_tensor_data(data.reshape(dims[0], -1))
    writer.close()
    return path


def cached(shape: Shape, note=lambda text: None) -> Path:
    """The GGUF of ``shape``, built on first use (``note`` says so: it takes a while)."""
    folder = cache_dir() / "synthetic"
    path = folder / f"{shape.name}-{shape.quant}-v{FORMAT_VERSION}.gguf"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        note(f"building {path.name} ({shape.file_bytes() / 1e9:.1f} GB, random weights, once) …")
        tmp = path.with_suffix(".part")
        try:
            build(shape, tmp)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    return path
