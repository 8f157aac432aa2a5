"""Issue 59 items 2 and 6 and the log line, against a running `specchat serve` (stdlib only).

    python serve_cases.py PORT victim   # a victim streams while poisoned requests arrive
    python serve_cases.py PORT victim-more  # the same with other extreme sampling values
    python serve_cases.py PORT burst    # 50 clients connect at once
    python serve_cases.py PORT escape   # a request line holding an OSC escape (check serve's stderr)
"""
import http.client
import json
import re
import socket
import sys
import threading
import time

HOST = "127.0.0.1"
PORT = int(sys.argv[1])


def post(body, timeout=300):
    conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def chat(text, **kw):
    return {"messages": [{"role": "user", "content": text}], **kw}


POISONS = [{"temperature": t} for t in (1e-320, 5e-324, 1e-45)]
MORE = [{"temperature": 1e308}, {"top_p": 5e-324}, {"top_p": 1e-320, "temperature": 1e-320}, {"top_k": 2**62},
        {"top_k": 1, "temperature": 1e-320}, {"seed": 2**64 - 1}, {"max_tokens": 2**62}]


def victim(poisons=POISONS):
    n = 96
    conn, resp = post(chat("Count from 1 to 200, one number per line.", max_tokens=n, stream=True,
                           temperature=0.7, seed=1, stream_options={"include_usage": True}))
    assert resp.status == 200, resp.status
    chunks, poisoned = [], []
    done = False
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            break
        chunks.append(json.loads(line[6:]))
        if len(chunks) == 3:  # the victim is mid-reply: now the poison
            for stream in (False, True):
                for poison in poisons:
                    def send(poison=poison, stream=stream):
                        c, r = post(chat("Hi", **{"max_tokens": 8, **poison}, stream=stream))
                        body = r.read().decode()
                        if r.status == 200:  # what it ended with, not the whole body
                            body = "finish " + ",".join(sorted(set(re.findall(r'"finish_reason": "(\w+)"', body))))
                        poisoned.append((json.dumps(poison), stream, r.status, body.replace("\n", " ")[:160]))
                    threading.Thread(target=send).start()
    time.sleep(2)
    errors = [c for c in chunks if "error" in c]
    finish = [ch["finish_reason"] for c in chunks for ch in c.get("choices", []) if ch.get("finish_reason")]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    for p in sorted(poisoned, key=repr):
        print("poison %s stream=%s -> HTTP %d %s" % p)
    print(f"victim: {len(chunks)} chunks, errors={len(errors)}, finish={finish}, usage={usage}, [DONE]={done}")
    ok = done and not errors and finish == ["length"] and usage and usage[0]["completion_tokens"] == n
    print("VICTIM OK" if ok else "VICTIM HARMED")


def burst(n=50):
    results = [None] * n
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait()
        try:
            c = http.client.HTTPConnection(HOST, PORT, timeout=600)
            c.request("POST", "/v1/chat/completions", json.dumps(chat(f"Say {i}.", max_tokens=4, temperature=0)),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            results[i] = r.status if r.status != 200 else json.loads(r.read())["choices"][0]["finish_reason"]
        except OSError as exc:
            results[i] = repr(exc)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tally = {}
    for r in results:
        tally[r] = tally.get(r, 0) + 1
    print(f"burst of {n}: {tally} in {time.time() - t0:.1f} s")


def escape():
    for line in (b"GET /\x1b]0;pwned\x07 HTTP/1.1\r\n\r\n", b"GET /\x1b]0;pwned\x07\r\n\r\n",
                 b"\x1b]0;pwned\x07 / HTTP/1.1\r\n\r\n", b"GET /health HTTP/1.1\r\nHost: \x1b[2J\r\n\r\n"):
        s = socket.create_connection((HOST, PORT))
        s.sendall(line)
        print(repr(line), "->", s.recv(200).split(b"\r\n")[0])
        s.close()


{"victim": victim, "victim-more": lambda: victim(MORE), "burst": burst, "escape": escape}[sys.argv[2]]()
