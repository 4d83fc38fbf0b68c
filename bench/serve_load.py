"""A bounded load on `megatron-app serve` at URL: CLIENTS threads send REQUESTS streamed
/v1/completions between them (prompts from the corpus' opening words, MAX_TOKENS greedy tokens
each, no stop), and report requests/s, generated tokens/s, time to first token and latency
(p50, p99) as one JSON line.

  serve_load.py URL CLIENTS REQUESTS MAX_TOKENS
"""
import json
import statistics
import sys
import threading
import time

import requests

PROMPTS = ["It is a truth universally acknowledged", "Mr. Darcy said", "She was",
           "Elizabeth could not", "The ball at Netherfield", "My dear Mr. Bennet",
           "Lydia was", "In vain have I struggled"]


def one(url, prompt, max_tokens, out):
    start = time.perf_counter()
    first, tokens = None, 0
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    with requests.post(url + "/v1/completions", json=body, stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines(decode_unicode=True):
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif first is None and any(c["text"] for c in chunk["choices"]):
                first = time.perf_counter() - start
    out.append((first, time.perf_counter() - start, tokens))


def main():
    url, clients, total, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    results, lock, next_request = [], threading.Lock(), [0]

    def client():
        while True:
            with lock:
                i = next_request[0]
                next_request[0] += 1
            if i >= total:
                return
            one(url, PROMPTS[i % len(PROMPTS)], max_tokens, results)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ttft = sorted(r[0] for r in results if r[0] is not None)
    latency = sorted(r[1] for r in results)
    pct = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))]
    print(json.dumps({
        "clients": clients, "requests": len(results), "seconds": round(wall, 2),
        "requests_per_s": round(len(results) / wall, 2),
        "tokens_per_s": round(sum(r[2] for r in results) / wall, 1),
        "ttft_p50_ms": round(1000 * statistics.median(ttft), 1),
        "ttft_p99_ms": round(1000 * pct(ttft, 0.99), 1),
        "latency_p50_ms": round(1000 * statistics.median(latency), 1),
        "latency_p99_ms": round(1000 * pct(latency, 0.99), 1)}))


if __name__ == "__main__":
    main()
