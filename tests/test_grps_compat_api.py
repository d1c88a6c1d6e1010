"""grps's names on grps-py's API objects: registry lookups, the base classes' `_path` / `_device` /
`_args`, grps's `GrpsContext(grpc_context, http_request)` signature, and the modules grps's template
imports (`grps_framework.apis.grps_pb2_grpc`, `grps_framework.test`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import grps_py
from grps_py.core.context import GrpsContext, HttpRequest
from grps_py.core.model import Converter, ModelInferer, converter_register, inferer_register
from grps_py.protos import grps_pb2_grpc


@pytest.fixture
def registered() -> Iterator[tuple[ModelInferer, Converter]]:
    inferer, converter = ModelInferer(), Converter()
    inferer_register.register("compat_api_inferer", inferer)
    converter_register.register("compat_api_converter", converter)
    yield inferer, converter
    inferer_register.unregister("compat_api_inferer")
    converter_register.unregister("compat_api_converter")


def test_inferer_register_has_grps_lookups(registered: tuple[ModelInferer, Converter]) -> None:
    inferer, _ = registered
    assert inferer_register.get_model_inferer("compat_api_inferer") is inferer
    assert inferer_register.model_inferer_dict["compat_api_inferer"] is inferer
    assert (
        inferer_register.get("compat_api_inferer") is inferer
        and "compat_api_inferer" in inferer_register.names()
    )
    with pytest.raises(RuntimeError, match="Model inferer name nobody not registered"):
        inferer_register.get_model_inferer("nobody")
    assert inferer_register.get("nobody") is None


def test_converter_register_has_grps_lookups(registered: tuple[ModelInferer, Converter]) -> None:
    _, converter = registered
    assert converter_register.get_converter("compat_api_converter") is converter
    assert converter_register.converter_dict["compat_api_converter"] is converter
    with pytest.raises(ValueError, match="Converter nobody not registered"):
        converter_register.get_converter("nobody")
    converter_register.unregister("compat_api_converter")
    assert "compat_api_converter" not in converter_register.converter_dict  # the live dict, as grps's


def test_grps_attribute_names_are_grps_py_attributes() -> None:
    inferer = ModelInferer()
    inferer.init("/models/m.pt", "cuda:0", {"k": 1})
    assert (inferer._path, inferer._device, inferer._args) == ("/models/m.pt", "cuda:0", {"k": 1})
    inferer._device = "cpu"  # grps code may assign them too
    assert inferer.device == "cpu"
    inferer._args = None  # grps's base leaves _args None without args; grps-py keeps a dict
    assert inferer.args == {}
    converter = Converter()
    converter.init("vocab.txt", {"n": 2})
    assert (converter._path, converter._args) == ("vocab.txt", {"n": 2})
    assert (converter.path, converter.args) == ("vocab.txt", {"n": 2})


def test_grps_context_takes_grps_positional_arguments() -> None:
    request = HttpRequest(method="POST", path="/x", query={}, headers={}, body=b"")
    ctx = GrpsContext(None, request)
    assert isinstance(ctx, grps_py.GrpsContext) and ctx.get_http_request() is request
    assert not GrpsContext().if_streaming() and GrpsContext(grpc_context=object()).get_http_request() is None
    assert GrpsContext(streaming=True, request_id="r").if_streaming()


def test_template_modules_are_grps_py_objects() -> None:
    from grps_framework.apis import grps_pb2_grpc as alias_grpc
    from grps_framework.test import GrpsTest

    assert alias_grpc.GrpsServiceStub is grps_pb2_grpc.GrpsServiceStub
    assert alias_grpc.add_GrpsServiceServicer_to_server is grps_pb2_grpc.add_GrpsServiceServicer_to_server
    assert callable(GrpsTest.test_init) and GrpsTest.executor is None
