# The converter of grps's customized-HTTP example, written to its published behaviour: the request is a
# JSON body {"a": ..., "b": ...}; the answer is {"c": a + b} as application/json. Any problem is answered
# 500, text/plain, with the traceback (as grps's example does: its author chose to show it), after being
# reported on the context. Written against grps's API only: grps_framework.* and Flask.
import http
import json
import traceback

from flask import Response

from grps_framework.apis.grps_pb2 import GrpsMessage
from grps_framework.context.context import GrpsContext
from grps_framework.converter.converter import Converter, converter_register
from grps_framework.logger.logger import clogger


class AddConverter(Converter):
    def init(self, path=None, args=None):
        super().init(path, args)
        clogger.info("add converter init, path: %s, args: %s", path, args)

    def preprocess(self, inp: GrpsMessage, context: GrpsContext):
        try:
            request = context.get_http_request()  # a Flask request
            if request.content_type != "application/json":
                raise ValueError(f"content_type error, unsupported type: {request.content_type}")
            doc = request.get_json()
            if "a" not in doc or "b" not in doc:
                raise KeyError(f"request json error, need key a and b, request_json: {doc}")
            return {"a": float(doc["a"]), "b": float(doc["b"])}
        except Exception:
            message = traceback.format_exc()
            context.set_err_msg(message)
            context.set_http_response(
                Response(
                    response=message, status=http.HTTPStatus.INTERNAL_SERVER_ERROR, content_type="text/plain"
                )
            )
            clogger.error("add converter preprocess failed: %s", message)
        return {}

    def postprocess(self, inp, context: GrpsContext) -> GrpsMessage:
        try:
            if "c" not in inp:
                raise KeyError(f"infer output error, need key c, inp: {inp}")
            context.set_http_response(
                (json.dumps(inp), http.HTTPStatus.OK, {"Content-Type": "application/json"})
            )
        except Exception:
            message = traceback.format_exc()
            context.set_err_msg(message)
            context.set_http_response(
                (message, http.HTTPStatus.INTERNAL_SERVER_ERROR, {"Content-Type": "text/plain"})
            )
            clogger.error("add converter postprocess failed: %s", message)
        return GrpsMessage()


converter_register.register("your_converter", AddConverter())
