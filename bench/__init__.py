"""Benchmarks and evaluations: the `manage.py bench_*` and `eval_recall` commands, the scripted
OpenAI-compatible LLM they (and the tests) talk to, and one launcher for daphne, that LLM and a
loopback Redis.

Nothing under chat/, memory/, explorer/ or config/ imports from here. Each benchmark runs in a
scratch database of its own by default (`bench.scratch`), and deletes only what it made.
"""
