"""Continuous batching against request-level batching and one request at a time, side by side in one run.

    .venv/bin/python bench/generation.py [--rounds 5] [--concurrency 16] [--per-client 3]
                                         [--device cpu|cuda] [--quick]

Three servers of the same TinyGpt weights (examples/tiny_gpt/models/tiny_gpt.pt), from
bench/projects/generation_tiny_gpt, all started before the first round and kept up to the end:

- (a) `inferer_type: generative`: the continuous batcher, max_running 16 (conf/inference_continuous.yml);
- (b) grps-py's request-level dynamic batching (max_batch_size 16, batch_timeout_us 3000) of
  examples/tiny_gpt/src/tiny_gpt_request_batching.py: a batch is generated together until its longest
  member ends, and requests that arrive meanwhile wait for the next batch;
- (c) the same inferer without batching: one request at a time.

The load is closed-loop and the same for all three: `--concurrency` clients, each sending its
`--per-client` chat requests back to back (a new one as soon as the previous answer ended), over OIP
HTTP `POST /v2/models/tiny-gpt/generate_stream` (server-sent events; greedy, `temperature` 0, one
`max_tokens` each from a fixed seeded list of 16..256). The clients' first requests are staggered by
`--stagger-ms` (client i starts i * stagger after the round's start), as users' arrivals are; every
later request starts when its client's previous one ends. Every request asks for `ignore_eos`, so it
generates exactly its `max_tokens` (the model's own chat answers end after 75 to 185 tokens, and the
text goes on past them); with `--stop-at-eos` a generation ends at end-of-text or at its `max_tokens`,
whichever comes first.

Measured by the client (one asyncio thread, raw sockets): tokens/s = generated tokens (the `output_ids`
the events carry) / the round's wall time (first request sent to last event received); time to first
token (TTFT) = request start (before connecting) to the first event that carries text, p50 and p99
over the round's requests. Also the server's CPU time per token and the cores the server and the client
kept busy (/proc and the client's process time), which tell a run bound by the model's steps from one
bound by the per-token serving path. Each round measures every server once, in rotating order; the table shows
medians over rounds, the ratios a/c and a/b and the targets (a >= 3x c and >= 1.5x b in tokens/s; a's
p99 TTFT at most a third of b's), then each round's figures, and goes to
bench/results/generation-<time>.md. Each answer's text is compared across the three servers (greedy:
they should agree).

Nothing is pinned: the servers and the client share the machine's cores. The model's torch uses
`--torch-threads` threads (OMP_NUM_THREADS) in every server, 1 by default, leaving a core to the
server's event loop and the client. Only one server is loaded at a time; the others idle.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import proctree
import yaml
from compare import machine, start_process, stopper

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "bench" / "projects" / "generation_tiny_gpt"
RESULTS = ROOT / "bench" / "results"
MODEL = "tiny-gpt"
PATH = f"/v2/models/{MODEL}/generate_stream"
READY_PATTERN = r"listening: http \S+:(\d+) grpc (\d+)[\s\S]*loaded models"
READY_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 120.0
SEED = 23
MAX_TOKENS_RANGE = (16, 256)
# Chat questions: most from the model's corpus (it answers them in a sentence), some not (it babbles
# until it finds a sentence it knows). The chat template is TinyGpt's (examples/tiny_gpt/README.md).
QUESTIONS = (
    "What is a model server?",
    "What is the prefill?",
    "What is the decode?",
    "Why use a key and value cache?",
    "What is continuous batching?",
    "What does greedy sampling do?",
    "What is a slot?",
    "Who are you?",
    "Hello!",
    "What is streaming?",
    "Tell me a joke",
    "Why batch requests?",
    "How do you stream tokens?",
    "What is top p?",
    "Explain timeouts.",
    "Summarize continuous batching in detail.",
)


def chat_prompt(question: str) -> str:
    return f"user: {question}\nassistant:"


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    conf: str  # the inference.yml under PROJECT/conf


VARIANTS = (
    Variant("a", "(a) continuous batching", "inference_continuous.yml"),
    Variant("b", "(b) request-level dynamic batching", "inference_request_batching.yml"),
    Variant("c", "(c) one request at a time", "inference_one_at_a_time.yml"),
)


@dataclass(frozen=True)
class Job:
    index: int
    question: str
    max_tokens: int
    ignore_eos: bool = True

    def body(self) -> bytes:
        parameters = {"max_tokens": self.max_tokens, "temperature": 0, "ignore_eos": self.ignore_eos}
        return orjson.dumps({"text_input": chat_prompt(self.question), "parameters": parameters})


def workload(count: int, ignore_eos: bool) -> list[Job]:
    """The same seeded list of chat requests for every server and round."""
    rng = random.Random(SEED)
    lengths = [rng.randint(*MAX_TOKENS_RANGE) for _ in range(count)]
    return [Job(i, QUESTIONS[i % len(QUESTIONS)], n, ignore_eos) for i, n in enumerate(lengths)]


# -- servers -------------------------------------------------------------------------------------
@dataclass
class Server:
    variant: Variant
    port: int
    pid: int
    log: Path
    stop: Callable[[], None] = field(repr=False)


def start_server(variant: Variant, workdir: Path, device: str, torch_threads: int) -> Server:
    """`grps-py serve` of the project with the variant's inference.yml, its device set to `device`."""
    conf = yaml.safe_load((PROJECT / "conf" / variant.conf).read_text())
    for model in conf["models"]:
        model["device"] = device
    inference = workdir / f"inference-{variant.key}.yml"
    inference.write_text(yaml.safe_dump(conf, sort_keys=False))
    grps_py = Path(sys.executable).parent / "grps-py"
    cmd = [str(grps_py), "serve", str(PROJECT), "--inference-conf", str(inference), "--port", "0,0"]
    threads = str(torch_threads)
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    name = f"generation-{variant.key}"
    proc, port, _ = start_process(name, cmd, workdir, READY_PATTERN, READY_TIMEOUT_S, env)
    return Server(variant, port, proc.pid, workdir / f"{name}.log", stopper(proc))


@contextmanager
def started(workdir: Path, device: str, torch_threads: int) -> Iterator[list[Server]]:
    servers: list[Server] = []
    try:
        for variant in VARIANTS:
            print(f"starting {variant.label}", file=sys.stderr, flush=True)
            servers.append(start_server(variant, workdir, device, torch_threads))
        yield servers
    finally:
        for server in servers:
            server.stop()


# -- the client ----------------------------------------------------------------------------------
@dataclass
class Answer:
    job: Job
    started: float
    first_text: float | None = None
    ended: float = 0.0
    tokens: int = 0
    text: str = ""
    finish: str | None = None

    @property
    def ttft_s(self) -> float:
        return (self.first_text if self.first_text is not None else self.ended) - self.started


class StreamError(RuntimeError):
    pass


async def generate_stream(port: int, job: Job) -> Answer:
    """One generate_stream request on a connection of its own, its events read as they arrive."""
    answer = Answer(job, time.perf_counter())
    body = job.body()
    request = (
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        if head[9:12] != b"200":
            raise StreamError(f"HTTP {head[9:12].decode()}: {(await reader.read(300))!r}")
        texts: list[str] = []
        pending = b""
        async for chunk in _body_chunks(reader, head.lower()):
            pending += chunk
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                _take_event(answer, event, texts)
        answer.ended = time.perf_counter()
        answer.text = "".join(texts)
        return answer
    finally:
        writer.close()


async def _body_chunks(reader: asyncio.StreamReader, head: bytes) -> AsyncIterator[bytes]:
    """The response body as it arrives: chunked transfer encoding, or read to the end."""
    if b"transfer-encoding: chunked" not in head:
        while data := await reader.read(65536):
            yield data
        return
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            return
        yield await reader.readexactly(size)
        await reader.readexactly(2)


def _take_event(answer: Answer, event: bytes, texts: list[str]) -> None:
    if not event.startswith(b"data: "):
        return
    doc = orjson.loads(event[6:])
    if "error" in doc:
        raise StreamError(f"error event: {doc['error']!s:.300}")
    text = doc.get("text_output", "")
    if text and answer.first_text is None:
        answer.first_text = time.perf_counter()
    texts.append(text)
    ids = doc.get("output_ids", [])
    answer.tokens += len(ids) if isinstance(ids, list) else 1  # one id is sent as a scalar
    answer.finish = doc.get("finish_reason", answer.finish)


# -- measuring -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    round: int
    variant: str  # Variant.key
    seconds: float
    answers: tuple[Answer, ...]
    errors: int
    server_cpu_s: float  # the server's CPU time (all its threads) over the round
    client_cpu_s: float  # this process's

    @property
    def server_cpu_us_per_token(self) -> float:
        return self.server_cpu_s / self.tokens * 1e6 if self.tokens else float("nan")

    @property
    def tokens(self) -> int:
        return sum(a.tokens for a in self.answers)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def ttft_ms(self, quantile: float) -> float:
        return percentile([a.ttft_s for a in self.answers], quantile) * 1e3

    def latency_ms(self, quantile: float) -> float:
        return percentile([a.ended - a.started for a in self.answers], quantile) * 1e3


def percentile(values: list[float], quantile: float) -> float:
    """Nearest rank: p99 of 48 values is the largest."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(quantile * len(ordered) + 0.5) - 1))]


async def measure(server: Server, jobs: list[Job], concurrency: int, stagger_s: float, round_no: int) -> Run:
    """`concurrency` clients, client i sending jobs[i::concurrency] back to back from i * stagger_s on."""
    answers: list[Answer] = []
    errors: list[str] = []
    server_cpu = proctree.cpu_seconds([server.pid])
    client_cpu = time.process_time()
    began = time.perf_counter()

    async def client(i: int) -> None:
        await asyncio.sleep(i * stagger_s)
        for job in jobs[i::concurrency]:
            try:
                answers.append(await asyncio.wait_for(generate_stream(server.port, job), REQUEST_TIMEOUT_S))
            except (OSError, StreamError, asyncio.TimeoutError, ValueError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    await asyncio.gather(*(client(i) for i in range(concurrency)))
    ended = max((a.ended for a in answers), default=time.perf_counter())
    server_cpu = proctree.cpu_seconds([server.pid]) - server_cpu
    client_cpu = time.process_time() - client_cpu
    if errors:
        print(f"  {server.variant.label}: {len(errors)} errors, first: {errors[0]}", file=sys.stderr)
    seconds = ended - began
    return Run(round_no, server.variant.key, seconds, tuple(answers), len(errors), server_cpu, client_cpu)


async def warm_up(server: Server, concurrency: int) -> None:
    """Short requests, so the first round does not pay for first calls (torch's, the connections')."""
    jobs = [Job(i, QUESTIONS[i % len(QUESTIONS)], 16) for i in range(concurrency)]
    await asyncio.gather(*(generate_stream(server.port, job) for job in jobs))


async def run_all(servers: list[Server], args: argparse.Namespace) -> list[Run]:
    jobs = workload(args.concurrency * args.per_client, not args.stop_at_eos)
    for server in servers:
        await warm_up(server, args.concurrency)
    runs: list[Run] = []
    for round_no in range(1, args.rounds + 1):
        shift = (round_no - 1) % len(servers)
        for server in servers[shift:] + servers[:shift]:  # a different server first each round
            run = await measure(server, jobs, args.concurrency, args.stagger_ms / 1e3, round_no)
            runs.append(run)
            print(
                f"round {round_no} {server.variant.label}: {run.tokens_per_s:.0f} tokens/s, "
                f"TTFT p50 {run.ttft_ms(0.5):.0f} ms p99 {run.ttft_ms(0.99):.0f} ms, {run.seconds:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    return runs


# -- reporting -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Summary:
    tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    tokens: float
    errors: int
    server_cpu_us_per_token: float
    server_cores: float  # the server's CPU time / wall time
    client_cores: float


def summarize(runs: list[Run]) -> Summary:
    def med(values: list[float]) -> float:
        return float(statistics.median(values)) if values else float("nan")

    return Summary(
        med([r.tokens_per_s for r in runs]),
        med([r.ttft_ms(0.5) for r in runs]),
        med([r.ttft_ms(0.99) for r in runs]),
        med([r.latency_ms(0.5) for r in runs]),
        med([r.latency_ms(0.99) for r in runs]),
        med([float(r.tokens) for r in runs]),
        sum(r.errors for r in runs),
        med([r.server_cpu_us_per_token for r in runs]),
        med([r.server_cpu_s / r.seconds for r in runs]),
        med([r.client_cpu_s / r.seconds for r in runs]),
    )


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def agreement(runs: list[Run]) -> str:
    """Whether every server answered every request with the same text (greedy: they should)."""
    texts: dict[int, dict[str, set[str]]] = {}
    for run in runs:
        for answer in run.answers:
            texts.setdefault(answer.job.index, {}).setdefault(run.variant, set()).add(answer.text)
    differing = [i for i, by in texts.items() if len(set.union(*by.values())) > 1]
    if not differing:
        return f"Every request's text is the same on all three servers and in every round ({len(texts)})."
    i = differing[0]
    shown = {key: sorted(found)[0][:80] for key, found in sorted(texts[i].items())}
    return f"{len(differing)} of {len(texts)} requests differ across servers or rounds; e.g. {i}: {shown}."


def report(runs: list[Run], args: argparse.Namespace, began: str, device_note: str) -> str:
    by_key = {v.key: summarize([r for r in runs if r.variant == v.key]) for v in VARIANTS}
    a, b, c = by_key["a"], by_key["b"], by_key["c"]
    lines = [
        "| variant | tokens/s | TTFT p50 ms | TTFT p99 ms | request p50 ms | request p99 ms | tokens/round "
        "| server CPU µs/token | cores busy: server, client | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant in VARIANTS:
        s = by_key[variant.key]
        lines.append(
            f"| {variant.label} | {s.tokens_per_s:.0f} | {s.ttft_p50_ms:.0f} | {s.ttft_p99_ms:.0f} | "
            f"{s.latency_p50_ms:.0f} | {s.latency_p99_ms:.0f} | {s.tokens:.0f} | "
            f"{s.server_cpu_us_per_token:.0f} | {s.server_cores:.2f}, {s.client_cores:.2f} | {s.errors} |"
        )
    a_c = a.tokens_per_s / c.tokens_per_s
    a_b = a.tokens_per_s / b.tokens_per_s
    ttft = a.ttft_p99_ms / b.ttft_p99_ms
    lines += [
        "",
        "| ratio | measured | target | |",
        "|---|---:|---:|---|",
        f"| tokens/s a / c | {a_c:.2f}x | >= 3x | {verdict(a_c >= 3)} |",
        f"| tokens/s a / b | {a_b:.2f}x | >= 1.5x | {verdict(a_b >= 1.5)} |",
        f"| TTFT p99 a / b | {ttft:.2f} | <= 0.33 | {verdict(ttft <= 1 / 3)} |",
        "",
        agreement(runs),
        "",
        "Each round:",
        "",
        "| round | variant | tokens | seconds | tokens/s | TTFT p50 ms | TTFT p99 ms | server CPU s "
        "| client CPU s | errors |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in sorted(runs, key=lambda r: (r.round, r.variant)):
        lines.append(
            f"| {run.round} | {run.variant} | {run.tokens} | {run.seconds:.2f} | {run.tokens_per_s:.0f} | "
            f"{run.ttft_ms(0.5):.0f} | {run.ttft_ms(0.99):.0f} | {run.server_cpu_s:.2f} | "
            f"{run.client_cpu_s:.2f} | {run.errors} |"
        )
    host = machine()
    header = [
        f"## bench/generation.py, {began}",
        "",
        f"Machine: {host['cpu']}, {host['cores']} cores, {host['memory_gib']} GiB, Linux {host['kernel']}, "
        f"Python {host['python']}, load average at start {host['load_average_at_start']}; nothing pinned, "
        f"the client on the same machine. Device: {device_note}; torch threads per server: "
        f"{args.torch_threads}.",
        "",
        f"Load: {args.concurrency} closed-loop clients x {args.per_client} chat requests each "
        f"(first requests staggered by {args.stagger_ms:g} ms per client), OIP HTTP generate_stream, greedy, "
        f"max_tokens from a seeded list of {MAX_TOKENS_RANGE[0]}..{MAX_TOKENS_RANGE[1]} "
        + (
            "(a generation also ends at end-of-text)"
            if args.stop_at_eos
            else "and ignore_eos (exactly that many)"
        )
        + f"; {args.rounds} rounds, medians over rounds. Command: "
        f"`{' '.join(['bench/generation.py', *sys.argv[1:]])}`.",
        "",
    ]
    return "\n".join(header + lines) + "\n"


def device_note(device: str) -> str:
    if device == "cpu":
        return "cpu"
    try:
        import torch

        if torch.cuda.is_available():
            return f"{device} ({torch.cuda.get_device_name(0)})"
    except ImportError:
        pass
    return f"{device} (no CUDA device here: the model falls back to the CPU)"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent clients")
    parser.add_argument("--per-client", type=int, default=3, help="requests each client sends per round")
    parser.add_argument("--stagger-ms", type=float, default=5.0, help="between the clients' first requests")
    parser.add_argument("--device", default="cpu", help="the models' device: cpu, cuda, cuda:N")
    parser.add_argument("--torch-threads", type=int, default=1, help="OMP_NUM_THREADS of every server")
    parser.add_argument(
        "--stop-at-eos", action="store_true", help="end at end-of-text too (default: ignore_eos, max_tokens)"
    )
    parser.add_argument("--quick", action="store_true", help="1 round of 1 request per client")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.per_client = 1, 1
    if min(args.rounds, args.concurrency, args.per_client, args.torch_threads) < 1:
        parser.error("--rounds, --concurrency, --per-client and --torch-threads must be at least 1")
    began = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    with (
        tempfile.TemporaryDirectory(prefix="grps-generation-") as tmp,
        started(Path(tmp), args.device, args.torch_threads) as servers,
    ):
        runs = asyncio.run(run_all(servers, args))
    text = report(runs, args, began, device_note(args.device))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"generation-{began}.md"
    path.write_text(text)
    print(text)
    print(f"written to {path.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
