"""``specchat serve``: an OpenAI-compatible HTTP endpoint over the batched engine."""
