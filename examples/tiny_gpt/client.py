"""Talk to the tiny_gpt example: a streamed chat and a completion with the official `openai` client,
embeddings, then the same model over OIP `generate_stream` and the grps API.

Serve it first (`grps-py serve examples/tiny_gpt`), then in another shell run
`python examples/tiny_gpt/client.py [--url HOST:PORT] [--grpc HOST:PORT]`.

The OpenAI part uses the `openai` package (`pip install openai`).
"""

from __future__ import annotations

import argparse
import json

import httpx

from grps_py.client import GrpsClient

MODEL = "tiny-gpt"
QUESTION = "What is continuous batching?"


def openai_part(url: str) -> None:
    try:
        import openai
    except ImportError:
        print("openai: skipped, the openai package is not installed (pip install openai)")
        return
    client = openai.OpenAI(base_url=f"http://{url}/v1", api_key="not-needed")
    print("models:", [model.id for model in client.models.list()])
    print(f"chat (streamed) {QUESTION!r} ->", end="", flush=True)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=120,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
        if chunk.usage is not None:
            print(
                f"\n  usage: {chunk.usage.prompt_tokens} prompt + {chunk.usage.completion_tokens} completion"
            )
    completion = client.completions.create(model=MODEL, prompt="The decode is", max_tokens=40, temperature=0)
    choice = completion.choices[0]
    print(f"completion 'The decode is' -> {choice.text!r} ({choice.finish_reason})")
    vectors = client.embeddings.create(model=MODEL, input=["a model server", "a KV cache"])
    print(f"embeddings: {len(vectors.data)} vectors of {len(vectors.data[0].embedding)} floats")


def oip_part(url: str) -> None:
    """Triton's generate extension: one server-sent event per token."""
    body = {"text_input": f"user: {QUESTION}\nassistant:", "parameters": {"max_tokens": 40, "temperature": 0}}
    print("oip generate_stream ->", end="", flush=True)
    with httpx.stream(
        "POST", f"http://{url}/v2/models/{MODEL}/generate_stream", json=body, timeout=60
    ) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                print(event["text_output"], end="", flush=True)
                if "finish_reason" in event:
                    print(f"  [{event['finish_reason']}]")


def grps_part(target: str, protocol: str) -> None:
    """The grps API: a prompt string in, text pieces streamed out (defaults from conf/inference.yml)."""
    with GrpsClient(target, protocol=protocol, timeout=60.0) as client:
        pieces = list(client.predict_stream(f"user: {QUESTION}\nassistant:", model=MODEL))
    print(f"grps {protocol} PredictStreaming: {len(pieces)} pieces, {''.join(pieces)[:60]!r}...")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="127.0.0.1:7080", help="the HTTP address (default %(default)s)")
    parser.add_argument("--grpc", default="127.0.0.1:7081", help="the gRPC address (default %(default)s)")
    args = parser.parse_args()
    openai_part(args.url)
    oip_part(args.url)
    grps_part(args.url, "http")
    grps_part(args.grpc, "grpc")


if __name__ == "__main__":
    main()
