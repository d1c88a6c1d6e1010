"""The transport floor: the cheapest server on grps-py's stack, for bench/compare.py.

    .venv/bin/python bench/floor.py [--host 127.0.0.1] [--connection tornado|grps]

A Tornado RequestHandler answers every POST with the request body, and grpc.aio answers every unary
method with the request bytes: no routing beyond that, no parsing, no model. It runs on the event loop
grps-py runs on by default (uvloop when installed), in one process, and prints
`listening: http PORT grpc PORT` once both ports are bound. Whatever grps-py does per request beyond
this is its own cost.

`--connection` picks what carries the HTTP requests to the handler: `tornado` (the default, the floor
the benchmark's goals are set against) is Tornado's own HTTPServer; `grps` is grps-py's own connection
(grps_py/http/connection.py: httptools under the same Tornado Application), the floor of grps-py's
stack as it is now.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import grpc
import tornado.httpserver
import tornado.web

from grps_py import event_loop
from grps_py.core.config import ServerSettings
from grps_py.http.listener import HttpListener

MAX_MESSAGE_BYTES = 1 << 30


class Echo(tornado.web.RequestHandler):
    def post(self, *_args: str) -> None:
        self.set_header("Content-Type", self.request.headers.get("Content-Type", "application/octet-stream"))
        self.finish(self.request.body)


class EchoMethods(grpc.GenericRpcHandler):
    """Every unary method answers its request bytes (no (de)serialization: bytes in, bytes out)."""

    def __init__(self) -> None:
        self._echo = grpc.unary_unary_rpc_method_handler(self._answer)

    @staticmethod
    async def _answer(request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
        return request

    def service(self, _details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return self._echo


async def serve(host: str, connection: str) -> None:
    app = tornado.web.Application([(r"/(.*)", Echo)])
    http_socket = tornado.netutil.bind_sockets(0, host)[0]
    http: tornado.httpserver.HTTPServer | HttpListener
    if connection == "grps":
        http = HttpListener(app, ServerSettings(), None)
        await http.listen([http_socket])
    else:
        http = tornado.httpserver.HTTPServer(
            app, max_body_size=MAX_MESSAGE_BYTES, max_buffer_size=MAX_MESSAGE_BYTES
        )
        http.add_sockets([http_socket])
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]
    rpc = grpc.aio.server(handlers=[EchoMethods()], options=options)
    grpc_port = rpc.add_insecure_port(f"{host}:0")
    await rpc.start()
    print(f"listening: http {http_socket.getsockname()[1]} grpc {grpc_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    http.stop()
    await rpc.stop(1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--connection", choices=("tornado", "grps"), default="tornado")
    args = parser.parse_args()
    event_loop.run(serve(args.host, args.connection))  # the loop grps-py picks by default


if __name__ == "__main__":
    main()
