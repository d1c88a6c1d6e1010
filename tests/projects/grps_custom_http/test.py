# The project's local unit test, in the shape of grps's customized-HTTP example's test.py: run
# `python test.py` from the project directory. It builds a Flask request by hand, runs the default DAG
# in-process (no server) and reads the answer the converter set as a Flask response.
import sys
import unittest

import flask

# import to register customized converter and inferer.
from src.add_converter import converter_register
from src.add_inferer import inferer_register

from grps_framework.apis.grps_pb2 import GrpsMessage
from grps_framework.context.context import GrpsContext
from grps_framework.test import GrpsTest


class MyTestCase(GrpsTest):
    def test_infer(self):
        self.assertGreater(len(converter_register.converter_dict), 0)
        self.assertGreater(len(inferer_register.model_inferer_dict), 0)
        self.test_init()

        data = {"a": 1, "b": 2}
        request = flask.Request(environ={"REQUEST_METHOD": "POST"})
        request._cached_json = (data, data)
        request.headers = {"Content-Type": "application/json"}

        context = GrpsContext(http_request=request)
        self.executor.infer(GrpsMessage(), context)  # with customized http, the messages are unused

        self.assertEqual(context.has_err(), False)
        response = context.get_http_response()
        self.assertEqual(response.status_code, 200)
        self.assertEqual(response.headers["Content-Type"], "application/json")
        self.assertEqual(response.response[0], b'{"c": 3.0}')

    def test_refused(self):
        self.test_init()

        data = {"a": 1}
        request = flask.Request(environ={"REQUEST_METHOD": "POST"})
        request._cached_json = (data, data)
        request.headers = {"Content-Type": "application/json"}

        context = GrpsContext(http_request=request)
        self.executor.infer(GrpsMessage(), context)

        self.assertEqual(context.has_err(), True)
        response = context.get_http_response()
        self.assertEqual(response.status_code, 500)
        self.assertIn(b"need key a and b", response.get_data())


if __name__ == "__main__":
    suite = unittest.TestSuite()
    suite.addTest(MyTestCase("test_infer"))
    suite.addTest(MyTestCase("test_refused"))
    runner = unittest.TextTestRunner()
    sys.exit(0 if runner.run(suite).wasSuccessful() else 1)
