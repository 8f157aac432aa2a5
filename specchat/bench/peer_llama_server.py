"""The llama-server peer rows: plain, ``-md`` with the profile's draft, its n-gram
``--spec-type``s, and ``peer:eagle3 γ`` drafting with **the same head** as ours (converted by
llama.cpp's ``convert_hf_to_gguf.py``, cached). Design notes: docs/design/bench.md"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from specchat.bench import memory
from specchat.bench.configs import WARMUP_TOKENS
from specchat.bench.peer import clip_emissions
from specchat.bench.row import BenchRow
from specchat.errors import SpecchatError
from specchat.paths import cache_dir
from specchat.remote.http import Endpoint, RemoteError
from specchat.sanitize import clean

VERSION = "0.3.36"  # llama-cpp-python's, whose vendored llama.cpp `make llama-server` builds
PEER_HINT = "run with --no-peer to skip the llama-server rows"


def server_bin_dir() -> Path | None:
    """Where ``make llama-server`` put llama-server ($SPECCHAT_LLAMA_SERVER_DIR first)."""
    env = os.environ.get("SPECCHAT_LLAMA_SERVER_DIR")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specchat" / "llama-server" / VERSION / "bin"
    for directory in ([Path(env)] if env else []) + [cache]:
        if (directory / "llama-server").is_file():
            return directory
    return None


def convert_script(bin_dir: Path) -> Path | None:
    return next((script for root in (bin_dir.parent / "src", bin_dir.parent.parent / "src")
                 for script in root.glob("llama_cpp_python-*/vendor/llama.cpp/convert_hf_to_gguf.py")), None)


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
                                hint=PEER_HINT)
        tmp.replace(out)
    return out


HEALTH_TIMEOUT_S = 120
READ_TIMEOUT_S = 600  # the longest silence in a stream: a long prompt's prefill on a busy CPU
_LEVEL = re.compile(r"[\d.]+ E ")  # llama.cpp's log prefix of an error: time, level


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """One llama-server started by :func:`start_server`: its process, endpoint and log."""

    def __init__(self, proc: subprocess.Popen, url: str, log: Any) -> None:
        self.proc, self.url, self.log = proc, url, log
        self.endpoint = Endpoint(url, read_timeout=READ_TIMEOUT_S)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _first_error(log: Any) -> str:
    """Why a server stopped, from its log: its first error-level line (llama.cpp's log
    marks them `` E ``; the first is the cause, the later ones its consequences),
    else the last line that names an error, else its last line; cleaned and cut."""
    log.seek(0)
    lines = [line.strip() for line in log.read().decode("utf-8", "replace").splitlines() if line.strip()]
    for line in lines:
        if (level := _LEVEL.match(line)) is not None:
            return clean(line[level.end():])[:200]
    errors = [line for line in lines if "error" in line.lower()]
    return clean((errors or lines or ["(no message)"])[-1])[:200]


# llama.cpp's own kernels in every llama-server bench starts, as a user who picks it runs it:
# `make llama-server` builds the sdist unpatched, and should a build carry patches/llama.cpp,
# this switches them off (they read it once per process), so its rows say "stock kernels" truly
STOCK_KERNELS = {"SPECCHAT_GGML_UPSTREAM": "1"}


def start_server(args: list[str], what: str) -> ServerProcess:
    """``llama-server ARGS`` on stock kernels, on a free loopback port, once ``/health``
    answers; ``what`` names it in the one-line error (quoting its log's line that says why)
    when it never does."""
    bin_dir = server_bin_dir()
    if bin_dir is None:
        raise SpecchatError("no llama-server here (run `make llama-server`)", hint=PEER_HINT)
    port = _free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([str(bin_dir / "llama-server"), *args, "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **STOCK_KERNELS})
    url = f"http://127.0.0.1:{port}"
    health = Endpoint(url, connect_timeout=2, read_timeout=2)
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            message = f"llama-server exited with code {proc.returncode} on start ({clean(what)}): {_first_error(log)}"
            log.close()
            raise SpecchatError(message, hint=PEER_HINT)
        try:
            health.get_text("/health")  # 503 while the model loads
            return ServerProcess(proc, url, log)
        except RemoteError:
            pass
        if time.monotonic() > deadline:
            ServerProcess(proc, url, log).stop()
            raise SpecchatError(f"llama-server did not become healthy in {HEALTH_TIMEOUT_S} s ({clean(what)})",
                                hint=PEER_HINT)
        time.sleep(0.2)


@dataclasses.dataclass
class Streamed:
    """One streamed /completion: ``sent`` (perf_counter s, just before the request),
    ``emissions`` [[ms since sent, tokens], ...], ``end_ms`` (ms since sent to the
    stream's last chunk), ``timings`` (the final chunk's, {} when absent)."""

    sent: float
    output_ids: list[int]
    emissions: list[list[float]]
    finish_reason: str
    end_ms: float
    timings: dict

    def row(self, first: float) -> BenchRow:
        """The request's row; ``start_ms`` its send after ``first`` (perf_counter s), and its
        wall time to its last token (to the stream's end when it has none)."""
        return BenchRow(new_tokens=len(self.output_ids), finish_reason=self.finish_reason,
                        start_ms=(self.sent - first) * 1000.0, output_ids=self.output_ids, emissions=self.emissions,
                        wall_ms=self.emissions[-1][0] if self.emissions else self.end_ms,
                        server_drafted=self.timings.get("draft_n"), server_accepted=self.timings.get("draft_n_accepted"))


def stream_completion(server: ServerProcess, body: dict, stops: set[int]) -> Streamed:
    """POST ``body`` to the server's /completion, streamed, and stamp each chunk's tokens as
    they arrive; "eos" when it stopped on an end-of-generation token (or one of ``stops``)."""
    out: list[int] = []
    emissions: list[list[float]] = []
    finish, timings = "length", {}
    sent = time.perf_counter()
    try:
        for chunk in server.endpoint.stream("/completion", {**body, "stream": True, "return_tokens": True}):
            ids = [int(t) for t in chunk.get("tokens", [])]
            if ids:
                emissions.append([(time.perf_counter() - sent) * 1000.0, len(ids)])
                out += ids
            if chunk.get("stop"):
                timings = chunk.get("timings", {})
                if chunk.get("stop_type") == "eos" or (out and out[-1] in stops):
                    finish = "eos"
                break
    except (RemoteError, TypeError, ValueError) as exc:  # refused, an error status or line, tokens not ids
        raise SpecchatError(f"llama-server failed mid-request: {exc}", hint=PEER_HINT) from None
    end_ms = (time.perf_counter() - sent) * 1000.0
    return Streamed(sent, out, clip_emissions(emissions, len(out)), finish, end_ms, timings)


def plain_unavailable(loaded: Any) -> str | None:
    """Why the plain llama-server row cannot run here, or None."""
    if loaded.target.name != "llama.cpp":
        return "the llama-server peer needs a GGUF target on llama.cpp"
    if server_bin_dir() is None:
        return "no llama-server for the llama-server peer rows (run `make llama-server`)"
    return None


def completion_body(request: Any, params: Any, max_new_tokens: int) -> dict:
    """The /completion request for ``request``'s prompt ids at ``params``: no prompt cache
    (no run reuses another's prefill), no repeat penalty or min_p (ours has neither), and
    the request's own seed unless the params fix one."""
    return {"prompt": list(request.ids), "n_predict": max_new_tokens, "cache_prompt": False,
            "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k, "min_p": 0.0,
            "repeat_penalty": 1.0, "seed": request.seed if params.seed is None else params.seed}


def ngram_types(bin_dir: Path | None = None) -> tuple[str, ...]:
    """The n-gram ``--spec-type``s this llama-server offers, as its ``--help`` lists them."""
    bin_dir = bin_dir or server_bin_dir()
    if bin_dir is None:
        return ()
    try:
        shown = subprocess.run([str(bin_dir / "llama-server"), "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    listed = re.search(r"--spec-type ([\w,-]+)", shown.stdout + shown.stderr)
    return tuple(t for t in listed.group(1).split(",") if t.startswith("ngram-")) if listed else ()


def ngram_args(spec_type: str, size_n: int, size_m: int) -> list[str]:
    """llama-server's arguments for one n-gram type, matched to ours where it has the
    knob: lookup n-grams of ``size_n`` tokens (our prompt_lookup_max, as every peer is
    given) drafting up to ``size_m`` (our max_speculative_tokens); ngram-mod keeps the
    settings of llama.cpp's ``--spec-default`` (24-token matches, 48-64 drafts) and
    ngram-cache its own statistics, both with the draft cap ``--spec-draft-n-max``."""
    sized = {"ngram-simple", "ngram-map-k", "ngram-map-k4v"}
    knobs = ([f"--spec-{spec_type}-size-n", str(min(size_n, size_m)), f"--spec-{spec_type}-size-m", str(size_m)]
             if spec_type in sized else [])
    return ["--spec-type", spec_type, *knobs, "--spec-draft-n-max", str(size_m)]


# n-gram types whose drafts outlive a request, so bench starts their server afresh for each
# new chat (why: docs/design/bench.md, "llama-server")
REMEMBERS_EARLIER_REQUESTS = frozenset({"ngram-mod"})
WARMUP_PROMPT = 8  # a restarted server's untimed first call (bench's warm-up length): tokens
                   # of prompt for it, under ngram-mod's 24-token match, so it hashes none


class LlamaServerPeer:
    """One llama-server per (γ, type), started on first use; with layers on a GPU only one
    lives at a time (each holds the weights). ``head_folder``: the EAGLE-3 head, if any."""

    def __init__(self, loaded: Any, profile: Any, stops: set[int], head_folder: Path | None = None) -> None:
        target = loaded.target
        self.model_path, self.threads, self.n_ctx = target.model_path, target.n_threads, target.max_length
        self.n_gpu_layers = target.n_gpu_layers
        self.ceiling = profile.speculation.max_speculative_tokens
        self.lookup = profile.speculation.prompt_lookup_max
        self.bin_dir = server_bin_dir()
        draft = loaded.draft  # a GGUF draft model: the -md rows (its default drafting, and ours)
        self.draft_path = draft.model_path if draft is not None and draft.name == "llama.cpp" else None
        self.gguf = (head_gguf(head_folder, loaded.target_hf_folder(profile), convert_script(self.bin_dir))
                     if head_folder is not None else None)
        self.stops = set(stops)
        self._servers: dict[tuple[int, str], ServerProcess] = {}

    def _server(self, gamma: int, spec_type: str = "") -> ServerProcess:
        """The server of the target for (γ, type), started on first use at our threads,
        context and layers: type "-md", the profile's draft (γ -1: its own draft settings,
        else up to γ as ours), an n-gram ``--spec-type``, or "": plain (γ 0) or the head."""
        key = (gamma, spec_type)
        if key in self._servers:
            return self._servers[key]
        if spec_type == "-md":
            knobs = [] if gamma < 0 else ["--spec-draft-n-max", str(gamma), "--spec-draft-n-min", "0",
                                          "--spec-draft-p-min", "0"]
            # --spec-type draft-simple: its default is none, and -md alone loads the draft but never
            # drafts (the pair's -md rows were plain decoding, drafted 0: issue 56)
            spec = ["-md", str(self.draft_path), "--spec-type", "draft-simple", *knobs, "-ngld", str(self.n_gpu_layers)]
            what = f" -md {self.draft_path}"
        elif spec_type:
            spec, what = ngram_args(spec_type, self.lookup, self.ceiling), f" --spec-type {spec_type}"
        elif gamma:
            spec = ["-md", str(self.gguf), "--spec-type", "draft-eagle3", "--spec-draft-p-min", "0",
                    "--spec-draft-n-max", str(gamma), "--spec-draft-n-min", "0"]
            what = f" -md {self.gguf}"
        else:
            spec, what = [], ""
        if self.n_gpu_layers:
            self.close()
        args = ["-m", str(self.model_path), *spec, "-t", str(self.threads), "-c", str(self.n_ctx), "-np", "1",
                "-ngl", str(self.n_gpu_layers)]
        self._servers[key] = start_server(args, f"-m {self.model_path}{what}")
        return self._servers[key]

    def run(self, config: Any, request: Any, params: Any, max_new_tokens: int) -> BenchRow:
        if config.method == "draft_model":
            gamma, spec_type = (-1 if config.gamma == "auto" else int(config.gamma)), "-md"
        else:
            spec_type = config.spec_type
            gamma = (0 if config.method == "none" or spec_type else self.ceiling if config.gamma == "auto"
                     else int(config.gamma))
        if spec_type in REMEMBERS_EARLIER_REQUESTS and request.fresh:
            self._restart(gamma, spec_type, request, params)
        body = completion_body(request, params, max_new_tokens)
        got = stream_completion(self._server(gamma, spec_type), body, self.stops)
        return dataclasses.replace(got.row(0.0), wall_ms=got.end_ms, start_ms=None, rss_bytes=memory.rss_bytes())

    def _restart(self, gamma: int, spec_type: str, request: Any, params: Any) -> None:
        """A new chat on a server that remembers earlier requests: a new server, warmed up
        on the end of this prompt (too short for it to remember)."""
        server = self._servers.pop((gamma, spec_type), None)
        if server is None:
            return  # not started yet: nothing to forget (bench's own warm-up starts it)
        server.stop()
        warmup = SimpleNamespace(ids=list(request.ids)[-WARMUP_PROMPT:], seed=request.seed)
        stream_completion(self._server(gamma, spec_type), completion_body(warmup, params, WARMUP_TOKENS), self.stops)

    def close(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers = {}
