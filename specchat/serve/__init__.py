"""``specchat serve``: an OpenAI-compatible HTTP endpoint over the batched engine.

service.py builds what a request needs (the engine's worker, the chat template, the
profile's defaults); openai.py reads requests and shapes responses as OpenAI's API does;
reply.py folds a request's Steps into its text and vLLM-shaped speculation figures;
metrics.py keeps the server-wide counters under vLLM's Prometheus names; http.py is the
stdlib HTTP handler (auth, body limits, SSE, a client that goes away).
"""
