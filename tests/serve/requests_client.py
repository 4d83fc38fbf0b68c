"""`megatron-app serve` through Python's requests (Debian's python3-requests): Megatron's /api
greedy answers equal `megatron-app generate`'s (itself checked against PyTorch), requests sent
together get the tokens they get one at a time (continuous batching: greedy and seeded
sampling), a stream's text equals the whole answer, a client leaving a stream frees its slot,
and bad requests get 400 with Megatron's messages.

  requests_client.py --url URL --generated GENERATE.json --server-log LOG
"""
import argparse
import json
import threading
import time

import requests


def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


def put_api(url, body):
    r = requests.put(url + "/api", json=body, timeout=120)
    check(r.status_code == 200, f"/api {body}: {r.status_code} {r.text}")
    return r.json()


def completion(url, body):
    r = requests.post(url + "/v1/completions", json=body, timeout=120)
    check(r.status_code == 200, f"/v1/completions {body}: {r.status_code} {r.text}")
    return r.json()


def stream_text(url, body):
    """The text of a streamed completion, its finish reason and whether [DONE] closed it."""
    text, finish, done = "", None, False
    with requests.post(url + "/v1/completions", json=dict(body, stream=True), stream=True,
                       timeout=120) as r:
        check(r.status_code == 200, f"stream: {r.status_code}")
        check(r.headers["Content-Type"].startswith("text/event-stream"), "stream content type")
        for line in r.iter_lines(decode_unicode=True):
            if not line:
                continue
            check(line.startswith("data: "), f"an event line: {line!r}")
            data = line[len("data: "):]
            if data == "[DONE]":
                done = True
                continue
            chunk = json.loads(data)
            check(chunk["object"] == "text_completion", "chunk object")
            for choice in chunk["choices"]:
                text += choice["text"]
                finish = choice["finish_reason"] or finish
    return text, finish, done


def greedy_equals_generate(url, generated):
    prompts = [g["prompt"] for g in generated]
    n = max(len(g["tokens"]) for g in generated)
    answer = put_api(url, {"prompts": prompts, "tokens_to_generate": n, "top_k": 1,
                           "no_log": True})
    for g, text, tokens in zip(generated, answer["text"], answer["tokens"]):
        check(text == g["prompt"] + g["text"], f"/api text {text!r} != generate's")
        check(tokens == g["prompt_tokens"] + g["tokens"], "/api tokens != generate's")
    # The segments are the tokens' texts; logprobs only when asked.
    check("".join(answer["segments"][0]) == answer["text"][0], "segments spell the text")
    check(answer["logprobs"] is None, "no logprobs unless asked")
    lp = put_api(url, {"prompts": prompts[:1], "tokens_to_generate": 0, "logprobs": True})
    check(len(lp["logprobs"][0]) == len(generated[0]["prompt_tokens"]) - 1,
          "tokens_to_generate=0: a log-probability for each prompt token after the first")
    check(all(v <= 0 for v in lp["logprobs"][0]), "log-probabilities are <= 0")
    print(f"ok   /api greedy equals generate for {len(prompts)} prompts; logprobs")


def batching_changes_nothing(url, server_log):
    """Twelve requests at once against the same one at a time."""
    bodies = []
    for i in range(12):
        prompt = ["It is a truth", "Mr. Darcy", "She was", "Elizabeth"][i % 4]
        if i % 3 == 0:
            bodies.append(("api", {"prompts": [prompt], "tokens_to_generate": 12 + i, "top_k": 1,
                                   "no_log": True}))
        elif i % 3 == 1:
            bodies.append(("api", {"prompts": [prompt], "tokens_to_generate": 20, "top_k": 5,
                                   "temperature": 0.8, "random_seed": 100 + i, "no_log": True}))
        else:
            bodies.append(("v1", {"prompt": prompt, "max_tokens": 16, "top_p": 0.9,
                                  "seed": 7 * i}))

    def ask(kind, body):
        if kind == "api":
            return put_api(url, body)["text"]
        return completion(url, body)["choices"][0]["text"]

    alone = [ask(k, b) for k, b in bodies]
    together = [None] * len(bodies)
    busiest = [0]
    stop = threading.Event()

    def watch():  # the most requests the engine held at once
        while not stop.is_set():
            busiest[0] = max(busiest[0], requests.get(url + "/health").json()["pending_requests"])
            time.sleep(0.005)

    def run(i):
        together[i] = ask(*bodies[i])

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()
    for i, (a, b) in enumerate(zip(alone, together)):
        check(a == b, f"request {i} alone {a!r} != in a batch {b!r}")
    check(busiest[0] >= 2, f"the requests overlapped (at most {busiest[0]} at once)")
    print(f"ok   {len(bodies)} concurrent requests (up to {busiest[0]} at once) got their "
          "one-at-a-time answers")


def streaming(url, server_log):
    body = {"prompt": "It is a truth universally acknowledged", "max_tokens": 24,
            "temperature": 0}
    whole = completion(url, body)["choices"][0]
    text, finish, done = stream_text(url, body)
    check(text == whole["text"], f"streamed {text!r} != whole {whole['text']!r}")
    check(finish == whole["finish_reason"] and done, "the stream ends with a finish reason, [DONE]")
    # Stop strings: cut from the text, whole or streamed.
    stop = whole["text"][5:9]
    if stop:
        cut = completion(url, dict(body, stop=[stop]))["choices"][0]
        check(cut["text"] == whole["text"][:whole["text"].find(stop)] and
              cut["finish_reason"] == "stop", f"stop string {stop!r}: {cut}")
        text, finish, _ = stream_text(url, dict(body, stop=stop))
        check(text == cut["text"] and finish == "stop", f"streamed with a stop string: {text!r}")
    # A client that leaves mid-stream: its request is cancelled, the slot freed.
    with requests.post(url + "/v1/completions", stream=True, timeout=60,
                       json={"prompt": "Mr. Darcy", "max_tokens": 110, "temperature": 0,
                             "stream": True}) as r:
        next(r.iter_lines())
    deadline = time.time() + 30
    while requests.get(url + "/health").json()["pending_requests"] != 0:
        check(time.time() < deadline, "a left stream still pending after 30 s")
        time.sleep(0.05)
    deadline = time.time() + 10
    while "a client left its stream" not in open(server_log).read():
        check(time.time() < deadline, "the server did not notice the client leaving")
        time.sleep(0.05)
    print("ok   streaming equals the whole answer; stop strings; a left stream is cancelled")


def bad_requests(url):
    cases = [
        ("PUT", "/api", {"tokens_to_generate": 4}, "prompts argument required"),
        ("PUT", "/api", {"prompts": "text"}, "prompts is not a list of strings"),
        ("PUT", "/api", {"prompts": []}, "prompts is empty"),
        ("PUT", "/api", {"prompts": ["a"] * 129}, "Maximum number of prompts is 128"),
        ("PUT", "/api", {"prompts": ["a"], "tokens_to_generate": -1},
         "tokens_to_generate must be an integer greater than or equal to 0"),
        ("PUT", "/api", {"prompts": ["a"], "tokens_to_generate": 0},
         "tokens_to_generate=0 implies logprobs should be True"),
        ("PUT", "/api", {"prompts": ["a"], "temperature": 0},
         "temperature must be a positive number less than or equal to 100.0"),
        ("PUT", "/api", {"prompts": ["a"], "top_k": 5, "top_p": 0.5},
         "cannot set both top-k and top-p samplings."),
        ("PUT", "/api", {"prompts": ["a"], "top_p_decay": 0.5},
         "top_p_decay cannot be set without top_p"),
        ("PUT", "/api", {"prompts": [""]}, "Empty prompts require add_BOS=true"),
        ("PUT", "/api", {"prompts": ["a"], "random_seed": -3},
         "random_seed must be a positive integer"),
        ("PUT", "/api", {"prompts": ["a"], "tokens_to_generate": 1000},
         "Length of prompt + tokens_to_generate longer than allowed"),
        ("PUT", "/api", {"prompts": ["a"], "logprobs": "yes"}, "logprobs must be a boolean value"),
        ("POST", "/v1/completions", {"prompt": "a", "n": 2}, "n > 1 not supported"),
        ("POST", "/v1/completions", {"max_tokens": 3}, "prompt is required"),
        ("POST", "/v1/completions", {"prompt": [1, 2, 999999]}, "token ids must be integers"),
        ("POST", "/completions", {"prompt": "a"}, "max_tokens is required"),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]},
         "unknown role 'robot'"),
    ]
    for method, path, body, message in cases:
        r = requests.request(method, url + path, json=body, timeout=30)
        check(r.status_code == 400, f"{path} {body}: {r.status_code}, expected 400")
        got = r.json()
        got = got["error"]["message"] if isinstance(got, dict) else got
        check(message in got, f"{path} {body}: {got!r}, expected {message!r}")
    r = requests.put(url + "/api", data="{not json", timeout=30)
    check(r.status_code == 400 and "not valid JSON" in r.text, f"bad JSON: {r.text}")
    print(f"ok   {len(cases) + 1} bad requests answered 400 with the field's message")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--generated", required=True)
    ap.add_argument("--server-log", required=True)
    a = ap.parse_args()
    generated = json.load(open(a.generated))
    greedy_equals_generate(a.url, generated)
    batching_changes_nothing(a.url, a.server_log)
    streaming(a.url, a.server_log)
    bad_requests(a.url)


if __name__ == "__main__":
    main()
