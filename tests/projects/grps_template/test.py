# The project's local unit test, in the shape of grps's template test.py: run `python test.py` from the
# project directory. It loads conf/ and the models in-process (no server) and calls the default DAG.

import sys
import unittest

# import to register customized converter and inferer.
from src.customized_converter import converter_register
from src.customized_inferer import inferer_register

from grps_framework.apis.grps_pb2 import GrpsMessage
from grps_framework.context.context import GrpsContext
from grps_framework.test import GrpsTest


class MyTestCase(GrpsTest):
    def test_infer(self):
        self.assertGreater(len(converter_register.converter_dict), 0)
        self.assertGreater(len(inferer_register.model_inferer_dict), 0)

        self.test_init()

        grps_in = GrpsMessage()
        grps_in.str_data = "grps"

        context = GrpsContext()
        grps_out = self.executor.infer(grps_in, context)

        self.assertEqual(context.has_err(), False)
        self.assertEqual(grps_out.str_data, "hello grps")

    def test_reported_error(self):
        self.test_init()

        context = GrpsContext()
        grps_out = self.executor.infer(GrpsMessage(str_data="refuse"), context)

        self.assertIsNone(grps_out)
        self.assertEqual(context.has_err(), True)
        self.assertEqual(context.get_err_msg(), "greeter converter refuses 'refuse'")


if __name__ == "__main__":
    suite = unittest.TestSuite()
    suite.addTest(MyTestCase("test_infer"))
    suite.addTest(MyTestCase("test_reported_error"))
    runner = unittest.TextTestRunner()
    sys.exit(0 if runner.run(suite).wasSuccessful() else 1)
