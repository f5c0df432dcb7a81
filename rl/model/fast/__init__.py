"""The speed layer: how tokenisation and encoder passes are scheduled, never what they compute.

``switches`` (the ``speed`` config block), ``encoding`` (the Q-network's encoding path, chosen once
when the Q-network is built), ``batching`` (padding and length bucketing), ``cuda_graphs``,
``tokenize`` (Rust tokenizer calls, tokenisation overlapped with embedding) and ``ragged``
(token ids of many chunks stored flat). docs/BENCH.md measures each switch; tests/rl/test_speed.py
checks that all of them on and all off give the same numbers.
"""
