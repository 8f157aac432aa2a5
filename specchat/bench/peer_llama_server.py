"""The llama-server peer rows: its plain generation, and drafting with **the same head** as ours.

``peer:none (llama-server)`` runs ``llama-server -m TARGET.gguf`` on the profile's own
GGUF: plain decoding by the server a user would run instead. ``peer:eagle3 γ`` runs ``llama-server -m TARGET.gguf -md head.gguf --spec-type
draft-eagle3`` on the profile's own GGUF, with the profile's head converted by
llama.cpp's own ``convert_hf_to_gguf.py --target-model-dir`` (cached by the head's
bytes). It answers the same prompt ids (``/completion`` with ids, streamed, so tokens
are stamped as they arrive) at the same sampling settings, seed, thread count and
max_new_tokens; ``--spec-draft-p-min 0`` so it drafts γ tokens as ours do (its default
stops a chain at a low draft probability). γ = auto drafts the profile's ceiling.

What it needs — ``make llama-server`` (the binaries and the script beside them) and the
target's Hugging Face folder for the converter (the embedded model's is unpacked by
specchat; other targets have none here) — is checked first: without it the row is
skipped with one line saying why.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from specchat.bench import memory
from specchat.bench.peer import clip_emissions
from specchat.errors import SpecchatError
from specchat.paths import cache_dir
from specchat.sanitize import clean

VERSION = "0.3.36"  # llama-cpp-python's, whose vendored llama.cpp `make llama-server` builds


def server_bin_dir() -> Path | None:
    """Where ``make llama-server`` put llama-server ($SPECCHAT_LLAMA_SERVER_DIR first)."""
    env = os.environ.get("SPECCHAT_LLAMA_SERVER_DIR")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specchat" / "llama-server" / VERSION / "bin"
    for directory in ([Path(env)] if env else []) + [cache]:
        if (directory / "llama-server").is_file():
            return directory
    return None


def convert_script(bin_dir: Path) -> Path | None:
    for root in (bin_dir.parent / "src", bin_dir.parent.parent / "src"):
        for script in root.glob("llama_cpp_python-*/vendor/llama.cpp/convert_hf_to_gguf.py"):
            return script
    return None


def unavailable(loaded: Any, profile: Any) -> str | None:
    """Why the row cannot run here, or None."""
    if loaded.head is None or loaded.target.name != "llama.cpp":
        return "the llama-server EAGLE-3 peer needs a GGUF target on llama.cpp and a head"
    bin_dir = server_bin_dir()
    if bin_dir is None:
        return "no llama-server for the EAGLE-3 peer row (run `make llama-server`)"
    if convert_script(bin_dir) is None:
        return f"llama.cpp's convert_hf_to_gguf.py is not beside {bin_dir} (run `make llama-server`)"
    if loaded.target_hf_folder(profile) is None:
        return "the EAGLE-3 peer row converts the head against the target's Hugging Face folder, which only " \
               "the embedded model has here"
    return None


def head_gguf(head_folder: Path, target_dir: Path, script: Path) -> Path:
    """The head converted by llama.cpp's own script, cached by the head's bytes."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        digest.update((head_folder / name).read_bytes())
    out = cache_dir() / "heads-gguf" / f"{digest.hexdigest()[:16]}.gguf"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".part")
        result = subprocess.run([sys.executable, str(script), str(head_folder), "--target-model-dir", str(target_dir),
                                 "--outfile", str(tmp), "--outtype", "bf16"], capture_output=True, text=True,
                                timeout=600, env={**os.environ, "PYTHONPATH": str(script.parent / "gguf-py")})
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise SpecchatError(f"llama.cpp's convert_hf_to_gguf.py could not convert the head in "
                                f"{clean(str(head_folder))}: {clean(last)[:200]}",
                                hint="run with --no-peer to skip the llama-server rows")
        tmp.replace(out)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plain_unavailable(loaded: Any) -> str | None:
    """Why the plain llama-server row cannot run here, or None."""
    if loaded.target.name != "llama.cpp":
        return "the llama-server peer needs a GGUF target on llama.cpp"
    if server_bin_dir() is None:
        return "no llama-server for the peer:none (llama-server) row (run `make llama-server`)"
    return None


class LlamaServerPeer:
    """One llama-server per γ (0: plain, no head), started on first use and stopped by
    ``close``. ``head_folder``: the EAGLE-3 head for γ ≥ 1 (converted on first use)."""

    def __init__(self, loaded: Any, profile: Any, stops: set[int], head_folder: Path | None = None) -> None:
        target = loaded.target
        self.model_path, self.threads, self.n_ctx = target.model_path, target.n_threads, target.max_length
        self.n_gpu_layers = target.n_gpu_layers
        self.ceiling = profile.speculation.max_speculative_tokens
        self.bin_dir = server_bin_dir()
        self.gguf = (head_gguf(head_folder, loaded.target_hf_folder(profile), convert_script(self.bin_dir))
                     if head_folder is not None else None)
        self.stops = set(stops)
        self._servers: dict[int, tuple[subprocess.Popen, str]] = {}

    def _url(self, gamma: int) -> str:
        if gamma not in self._servers:
            port = _free_port()
            head = ([] if not gamma else
                    ["-md", str(self.gguf), "--spec-type", "draft-eagle3", "--spec-draft-p-min", "0",
                     "--spec-draft-n-max", str(gamma), "--spec-draft-n-min", "0"])
            args = [str(self.bin_dir / "llama-server"), "-m", str(self.model_path), *head,
                    "-t", str(self.threads), "-c", str(self.n_ctx), "-np", "1",
                    "-ngl", str(self.n_gpu_layers), "--host", "127.0.0.1", "--port", str(port)]
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    raise SpecchatError(f"llama-server exited with code {proc.returncode} on start "
                                        f"(-m {clean(str(self.model_path))}"
                                        + (f" -md {clean(str(self.gguf))})" if gamma else ")"),
                                        hint="run with --no-peer to skip the llama-server rows")
                try:
                    with urllib.request.urlopen(url + "/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    proc.kill()
                    raise SpecchatError("llama-server did not become healthy in 120 s",
                                        hint="run with --no-peer to skip the llama-server rows")
                time.sleep(0.2)
            self._servers[gamma] = (proc, url)
        return self._servers[gamma][1]

    def run(self, config: Any, request: Any, params: Any, max_new_tokens: int) -> dict:
        gamma = 0 if config.method == "none" else self.ceiling if config.gamma == "auto" else int(config.gamma)
        url = self._url(gamma)
        body = {"prompt": list(request.ids), "n_predict": max_new_tokens, "stream": True, "cache_prompt": False,
                "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k, "min_p": 0.0,
                "repeat_penalty": 1.0, "seed": request.seed if params.seed is None else params.seed,
                "return_tokens": True}
        out: list[int] = []
        emissions: list[list[float]] = []
        finish, timings = "length", {}
        t0 = time.perf_counter()
        req = urllib.request.Request(url + "/completion", json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                if not line.startswith(b"data: "):
                    continue
                chunk = json.loads(line[6:])
                ids = [int(t) for t in chunk.get("tokens", [])]
                if ids:
                    emissions.append([(time.perf_counter() - t0) * 1000.0, len(ids)])
                    out += ids
                if chunk.get("stop"):
                    timings = chunk.get("timings", {})
                    if chunk.get("stop_type") == "eos" or (out and out[-1] in self.stops):
                        finish = "eos"
                    break
        wall_ms = (time.perf_counter() - t0) * 1000.0
        return {
            "new_tokens": len(out), "finish_reason": finish, "wall_ms": wall_ms,
            "emissions": clip_emissions(emissions, len(out)), "steps": [], "draft_kv_bytes": None,
            "peak_gpu_bytes": None, "rss_bytes": memory.rss_bytes(), "output_ids": out,
            "server_drafted": timings.get("draft_n"), "server_accepted": timings.get("draft_n_accepted"),
        }

    def close(self) -> None:
        for proc, _ in self._servers.values():
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._servers = {}
