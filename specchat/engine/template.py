"""A chat template: how messages become prompt ids, and which ids end a turn (a chat holds
one; serve, bench and distillation need only this)."""

from __future__ import annotations

from typing import Any

from specchat.turn import with_system

# end-of-turn markers of common chat templates, stopped on when the vocabulary has them
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "</s>", "<|endoftext|>")


class ChatTemplate:
    """``system_prompt``: put first in every prompt; ``enable_thinking``: for templates that
    take it (None: their default). ``stop_token_ids``: the end-of-turn markers and EOS."""

    def __init__(self, tokenizer: Any, *, system_prompt: str | None = None,
                 enable_thinking: bool | None = None) -> None:
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.enable_thinking = enable_thinking
        vocab = tokenizer.get_vocab()
        self.stop_token_ids = {vocab[t] for t in END_OF_TURN if t in vocab}
        if tokenizer.eos_token_id is not None:
            self.stop_token_ids.add(tokenizer.eos_token_id)

    @classmethod
    def of(cls, profile: Any, tokenizer: Any) -> ChatTemplate:
        """The profile's template: what every command that tokenises a chat asks."""
        return cls(tokenizer, system_prompt=profile.chat.system_prompt, enable_thinking=profile.chat.enable_thinking)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        messages = with_system(self.system_prompt, messages)
        kwargs = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}
        if self.tokenizer.chat_template:
            out = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
            ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
            return list(ids)
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
        return self.tokenizer(text)["input_ids"]
