# Reads the request through Flask's API, as grps model code does, and answers what it saw: JSON by
# default, or the answer form `?probe=` names (flask.Response objects, a streamed generator body).
import threading

import flask

from grps_framework.apis.grps_pb2 import GrpsMessage
from grps_framework.model_infer.inferer import ModelInferer, inferer_register

# Set by the test once it has read the first chunk of a streamed answer (the server runs in its process).
STREAM_GATE = threading.Event()
CLOSED = threading.Event()  # the streamed answer's generator was closed


def seen(request):
    files = {
        name: [
            {
                "filename": f.filename,
                "mimetype": f.mimetype,
                "size": f.content_length,
                "text": f.read().decode(),
            }
            for f in request.files.getlist(name)
        ]
        for name in request.files
    }
    return {
        "method": request.method,
        "path": request.path,
        "url": request.url,
        "query_string": request.query_string.decode(),
        "args": request.args.to_dict(flat=False),
        "first_a": request.args.get("a"),
        "n": request.args.get("n", type=int),
        "form": request.form.to_dict(flat=False),
        "values": request.values.to_dict(),
        "files": files,
        "cookies": request.cookies.to_dict(),
        "header": request.headers.get("x-probe"),
        "header_all": request.headers.getlist("X-Probe"),
        "content_type": request.content_type,
        "mimetype": request.mimetype,
        "is_json": request.is_json,
        "text": request.get_data(as_text=True),
        "data_size": len(request.data),
        "remote_addr": request.remote_addr,
    }


def stream(fail):
    try:
        yield "first\n"
        if fail:
            raise RuntimeError("failed mid-stream on purpose")
        yield b"second\n" if STREAM_GATE.wait(10) else b"late: the first chunk was held back\n"
    finally:
        CLOSED.set()


class FlaskProbe(ModelInferer):
    def infer(self, inp, context):
        request = context.get_http_request()
        probe = request.args.get("probe", "seen")
        if probe == "seen":
            context.set_http_response(seen(request))
        elif probe == "json":
            context.set_http_response({"json": request.get_json()})
        elif probe == "force":
            context.set_http_response({"json": request.get_json(force=True)})
        elif probe == "silent":
            context.set_http_response({"json": request.get_json(silent=True)})
        elif probe == "missing":
            context.set_http_response(request.form["nowhere"])  # Flask: a 400
        elif probe == "response":
            response = flask.Response("made", status=201, mimetype="text/x-made")
            response.headers["X-Made"] = "yes"
            response.set_cookie("a", "1")
            response.set_cookie("b", "2")
            context.set_http_response(response)
        elif probe == "override":
            context.set_http_response(
                (flask.Response("gone", mimetype="text/plain"), 410, {"X-Why": "moved"})
            )
        elif probe == "stream":
            STREAM_GATE.clear()
            CLOSED.clear()
            context.set_http_response(flask.Response(stream(False), mimetype="text/plain"))
        elif probe == "stream_fail":
            CLOSED.clear()
            context.set_http_response(flask.Response(stream(True), mimetype="text/plain"))
        elif probe == "fail_first":
            context.set_http_response(flask.Response(iter([1, 2]), mimetype="text/plain"))
        return GrpsMessage()


inferer_register.register("flask_probe", FlaskProbe())
