"""A FAKE llama-server / vLLM (stdlib only) that sends what issue 59 item 8 names.

    python fake_server.py PORT llama-accepted   # llama-server: draft_n_accepted > draft_n mid-reply
    python fake_server.py PORT vllm-list        # vLLM: 'logprobs' is a list, not an object
    python fake_server.py PORT llama-word       # llama-server, honest: a stop word ends a reply whose
                                                # last token (" one") came earlier too (for replay --simulate)

Only the routes specchat's remote clients call are answered, with just enough fields.
The first three tokens are well formed, so the partial reply before the bad chunk shows.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, MODE = int(sys.argv[1]), sys.argv[2]
WORDS = ["One", " two", " three", " four", " five", " six"]
WORD_REPLY = [(" one", 201), (" two", 202), (" one", 201), (" two", 202), (" one", 201)]  # then the stop word


class Fake(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _json(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _sse(self, chunks):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if MODE.startswith("vllm"):
            self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def do_GET(self):
        routes = {"/health": {"status": "ok"},
                  "/props": {"model_path": "fake.gguf", "build_info": "fake",
                             "default_generation_settings": {"params": {"speculative.types": "ngram-simple"}}},
                  "/slots": [{"id": 0, "speculative": True}],
                  "/v1/models": {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}}
        if self.path == "/metrics":
            text = "".join(f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} 0\n'
                           for i in range(4)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        elif self.path in routes:
            self._json(routes[self.path])
        else:
            self.send_error(404)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/apply-template":
            self._json({"prompt": "<user>hi</user>"})
        elif self.path == "/tokenize":
            self._json({"tokens": [1, 2, 3]})
        elif self.path == "/completion":
            chunks = []
            if MODE == "llama-word":
                for n, (word, i) in enumerate(WORD_REPLY, 1):
                    chunks.append({"content": word, "tokens": [i], "tokens_predicted": n, "stop": False,
                                   "timings": {"prompt_n": 3, "prompt_ms": 5.0, "predicted_ms": 10.0 * n}})
                chunks.append({"content": "", "stop": True, "stop_type": "word", "stopping_word": " three",
                               "tokens_predicted": len(WORD_REPLY), "timings": {"predicted_ms": 60.0}})
                return self._sse(chunks)
            for n, word in enumerate(WORDS, 1):
                drafts, kept = (4, 15) if n == 4 else (0, 0)  # the lie: 15 kept of 4 drafted
                chunks.append({"content": word, "tokens": [100 + n], "tokens_predicted": n, "stop": False,
                               "timings": {"prompt_n": 3, "prompt_ms": 5.0, "predicted_ms": 10.0 * n,
                                           "draft_n": drafts, "draft_n_accepted": kept}})
            chunks.append({"content": "", "stop": True, "stop_type": "eos", "tokens_predicted": len(WORDS),
                           "timings": {"predicted_ms": 60.0, "draft_n": 4, "draft_n_accepted": 15}})
            self._sse(chunks)
        elif self.path == "/v1/chat/completions":
            def chunk(word, logprobs, finish=None):
                return {"id": "x", "object": "chat.completion.chunk", "model": "fake-model",
                        "choices": [{"index": 0, "delta": {"content": word}, "logprobs": logprobs,
                                     "finish_reason": finish}]}
            good = [chunk(w, {"content": [{"token": w, "logprob": -0.1}]}) for w in WORDS[:3]]
            bad = chunk(WORDS[3], [{"token": WORDS[3], "logprob": -0.1}], "stop")  # a list, not an object
            self._sse(good + [bad])
        else:
            self.send_error(404)


ThreadingHTTPServer(("127.0.0.1", PORT), Fake).serve_forever()
