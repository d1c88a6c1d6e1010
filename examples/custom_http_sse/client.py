"""Chat with the custom_http_sse example: its OpenAI-style route streamed as server-sent events
(read with the standard library only), the same route without streaming, and the grps API.

Serve it first (`grps-py serve examples/custom_http_sse`), then in another shell run
`python examples/custom_http_sse/client.py [--url HOST:PORT] [--grpc HOST:PORT]`.
"""

from __future__ import annotations

import argparse
import http.client
import json
from collections.abc import Iterator
from typing import Any

ROUTE = "/v1/chat/completions"
QUESTION = "what does streaming with server-sent events look like"


def post(url: str, body: dict[str, Any]) -> http.client.HTTPResponse:
    host, _, port = url.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", ROUTE, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"{ROUTE} answered {response.status}: {response.read().decode()}")
    return response


def events(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    """The `data:` events of an SSE answer as they arrive (http.client undoes the chunking)."""
    for raw in response:  # one line at a time, as soon as it has arrived
        line = raw.decode().rstrip("\r\n")
        if not line.startswith("data:"):
            continue  # blank lines separate events; comments and other fields are not used here
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def chat_streaming(url: str) -> None:
    body = {"model": "echo", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    print(f"SSE {url}{ROUTE}: ", end="", flush=True)
    finish = None
    with post(url, body) as response:
        for chunk in events(response):
            choice = chunk["choices"][0]
            print(choice["delta"].get("content", ""), end="", flush=True)  # each token as it arrives
            finish = choice["finish_reason"] or finish
    print(f"  [finish_reason={finish}]")


def chat(url: str) -> None:
    body = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 4}
    with post(url, body) as response:
        answer = json.load(response)
    choice = answer["choices"][0]
    print(f"JSON {url}{ROUTE} (max_tokens 4): {choice['message']['content']!r} [{choice['finish_reason']}]")


def grps_api(url: str, protocol: str) -> None:
    """The same model through the grps API, with grps-py's client."""
    from grps_py.client import GrpsClient

    with GrpsClient(url, protocol=protocol, timeout=30.0) as client:
        print(f"grps {protocol} {url}: {client.predict(QUESTION, model='chat-1')!r}")
        tokens = list(client.predict_stream(f"streamed over {protocol}", model="chat-1"))
        print(f"grps {protocol} {url}, streamed: {tokens}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="127.0.0.1:7080", help="the HTTP address (default %(default)s)")
    parser.add_argument("--grpc", default="127.0.0.1:7081", help="the gRPC address (default %(default)s)")
    args = parser.parse_args()
    chat_streaming(args.url)
    chat(args.url)
    grps_api(args.url, "http")
    grps_api(args.grpc, "grpc")


if __name__ == "__main__":
    main()
