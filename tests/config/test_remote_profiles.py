"""Remote-engine profile keys: a server needs only backend and url; mistakes are one
line naming the key; the API key's variable name is kept, never its value."""

from __future__ import annotations

import textwrap

import pytest

from specchat.config import load_profile
from specchat.errors import ProfileError


def write(tmp_path, body: str):
    path = tmp_path / "p.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_running_server_needs_only_backend_and_url(tmp_path):
    p = load_profile(write(tmp_path, '[target]\nbackend = "vllm"\nurl = "http://10.0.0.2:8000"\napi_key_env = "VLLM_KEY"\n'))
    assert (p.target.backend, p.target.url, p.target.api_key_env, p.target.source) == (
        "vllm", "http://10.0.0.2:8000", "VLLM_KEY", "")


@pytest.mark.parametrize("body, words", [
    ('[target]\nbackend = "llama-server"\n', "needs the server's url"),
    ('[target]\nsource = "x"\nurl = "http://h:1"\n', "applies only to a server backend"),
    ('[target]\nbackend = "llama-server"\nurl = "h:1"\n', "http(s) URL"),
    ('[target]\nbackend = "llama-server"\nurl = "http://h:1"\napi_key_env = "sk-123 secret"\n', "environment variable"),
    ('[target]\nbackend = "llama-server"\nurl = "http://h:1"\nn_ctx = 4096\n', "does not apply to backend"),
    ('[target]\nsource = "x"\n[speculation]\nmethod = "draft_model"\n[speculation.draft]\nsource = "d"\nbackend = "vllm"\n'
     'url = "http://h:1"\n', "can serve only the target"),
    ('[target]\nbackend = "llama-sever"\nurl = "http://h:1"\n', "did you mean 'llama-server'"),
])
def test_remote_key_mistakes_are_one_line(tmp_path, body, words):
    with pytest.raises(ProfileError) as error:
        load_profile(write(tmp_path, body))
    text = str(error.value)
    assert words in text and "\n" not in text
