"""The tokenizer a GGUF file carries, read through llama.cpp, with the part of transformers'
tokenizer interface specchat uses; its own chat template renders under :mod:`.chat_template`'s budget."""

from __future__ import annotations

from functools import cached_property
from typing import Any


class GgufTokenizer:
    def __init__(self, llm: Any) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self.llm = llm
        self._vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
        self.chat_template = llm.metadata.get("tokenizer.chat_template")
        found = (llama_cpp.llama_vocab_eos(self._vocab), llama_cpp.llama_vocab_pad(self._vocab),
                 llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_token_id, self.pad_token_id, self.bos_token_id = (i if i >= 0 else None for i in found)  # -1: none

    def _text(self, token_id: int | None) -> str:
        if token_id is None:
            return ""
        raw = self._llama_cpp.llama_vocab_get_text(self._vocab, token_id)
        return raw.decode("utf-8", errors="replace") if raw else ""

    @cached_property
    def _vocabulary(self) -> dict[str, int]:
        vocab: dict[str, int] = {}
        for i in range(self.llm.n_vocab()):
            vocab.setdefault(self._text(i), i)
        return vocab

    def get_vocab(self) -> dict[str, int]:
        """Token text → id (the GGUF's token strings, as transformers' get_vocab gives)."""
        return dict(self._vocabulary)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_special_tokens, special=True)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens)}

    def decode(self, ids: list[int], skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool = False) -> str:
        data = self.llm.detokenize(list(ids), special=not skip_special_tokens)
        return data.decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                            tokenize: bool = True, **kwargs: Any) -> list[int] | str:
        if not self.chat_template:
            raise ValueError("this GGUF file has no chat template (tokenizer.chat_template)")
        from .chat_template import Budget, render

        text = render(self._template, Budget(), messages=messages, add_generation_prompt=add_generation_prompt,
                      bos_token=self._text(self.bos_token_id), eos_token=self._text(self.eos_token_id), **kwargs)
        return self.encode(text) if tokenize else text

    @cached_property
    def _template(self):
        from .chat_template import BudgetedSandbox

        def raise_exception(message: str):
            raise ValueError(message)

        env = BudgetedSandbox()
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template)
