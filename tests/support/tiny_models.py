"""Tiny, offline, random models that behave like real chat checkpoints.

Tests need a *complete local model directory* (config, safetensors weights,
generation config, tokenizer with a chat template) that a profile can point at,
without the Hub and in well under a second. The tokenizer is a real byte-level
BPE trained with ``tokenizers`` so decoding, special tokens and the chat template
exercise the same code paths as a downloaded model.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML, as SmolLM2 and Qwen use it; add_generation_prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding drafts a few tokens and lets the target model verify them.",
    "A small draft model proposes; the large model accepts or rejects each token.",
    "Hello! How are you today? I am fine, thank you for asking.",
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "Once upon a time there was a little cat who liked to sleep in the sun.",
    "The capital of France is Paris. The capital of Italy is Rome.",
    "user assistant system: you are a helpful assistant.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000.",
    "Please write a short poem about the sea and the wind and the stars.",
    "It was the best of times, it was the worst of times.",
]


def _train_tokenizer(vocab_size: int, corpus=None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus or _CORPUS) * 4, trainer=trainer)
    return tok


def build_tiny_tokenizer(directory, vocab_size: int = 400, corpus=None):
    """Train, wrap and save a chat tokenizer into ``directory``; returns it.

    A different ``corpus`` gives different merges: a tokenizer whose ids mean other
    tokens (for vocabulary-mismatch tests)."""
    from transformers import PreTrainedTokenizerFast

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(vocab_size, corpus),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    return tokenizer


def build_tiny_model(
    directory,
    vocab_size: int | None = None,
    seed: int = 0,
    num_layers: int = 2,
    hidden: int = 32,
    dtype=None,
    tokenizer=None,
    head_scale: float = 1.0,
):
    """Save a random Llama (and its tokenizer) as a complete local model directory.

    ``vocab_size`` defaults to the tokenizer's length; a larger value mimics
    checkpoints whose embedding matrix is padded past the vocabulary.
    ``head_scale`` multiplies the output head: a random model is nearly uniform over
    its tokens, real chat models are peaked (statistical checks need the latter).
    bitsandbytes 4-bit on CPU needs ``hidden`` a multiple of 64 (see
    loading/devices.check_quantized_layers). Returns the directory as a Path.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if tokenizer is None:
        tokenizer = build_tiny_tokenizer(directory)
    else:
        tokenizer.save_pretrained(directory)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = LlamaConfig(
        vocab_size=vocab_size or len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(dtype or torch.float32).eval()
    if head_scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(head_scale)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def build_tiny_pair(root) -> tuple[Path, Path]:
    """A target (2 layers) and a draft (1 layer, other seed) sharing one tokenizer."""
    root = Path(root)
    tokenizer = build_tiny_tokenizer(root / "tokenizer")
    target = build_tiny_model(root / "target", seed=0, num_layers=2, tokenizer=tokenizer)
    draft = build_tiny_model(root / "draft", seed=1, num_layers=1, tokenizer=tokenizer)
    return target, draft


def write_tiny_profile(
    path,
    target_dir,
    draft_dir=None,
    method: str = "draft_model",
    num_speculative_tokens: int | str = 3,
    temperature: float = 0.0,
    max_new_tokens: int = 16,
    seed: int | None = 0,
    dtype: str = "float32",
    quantization: str = "none",
    draft_num_layers: int | None = None,
    head=None,
) -> Path:
    """Write a profile TOML that points at local tiny model directories (``dtype`` and
    ``quantization`` apply to the target and the draft alike)."""
    model_keys = [f'dtype = "{dtype}"'] + ([f'quantization = "{quantization}"'] if quantization != "none" else [])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        f'description = "tiny random Llama ({method}) for tests"',
        "",
        "[target]",
        f"source = {_toml_str(target_dir)}",
        'device = "cpu"',
        *model_keys,
        "",
        "[speculation]",
        f'method = "{method}"',
        "num_speculative_tokens = "
        + (f'"{num_speculative_tokens}"' if isinstance(num_speculative_tokens, str) else str(num_speculative_tokens)),
    ]
    if method == "ngram":
        lines += ["prompt_lookup_min = 1", "prompt_lookup_max = 3"]
    if head is not None:
        lines.append(f"head = {_toml_str(head)}")
    if method == "draft_model":
        lines += ["", "[speculation.draft]", f"source = {_toml_str(draft_dir)}", *model_keys]
        if draft_num_layers is not None:
            lines.append(f"num_layers = {draft_num_layers}")
    lines += ["", "[sampling]", f"temperature = {temperature}", f"max_new_tokens = {max_new_tokens}"]
    if seed is not None:
        lines.append(f"seed = {seed}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _toml_str(value) -> str:
    # Literal strings: Windows paths keep their backslashes.
    return "'" + str(value) + "'"
