"""grps's `grps_framework.test`: `GrpsTest`, a unittest base that runs a project's models in-process.

A grps project's `test.py`, run from the project directory as grps's template does (`python test.py`):

    class MyTestCase(GrpsTest):
        def test_infer(self):
            self.test_init()
            context = GrpsContext()
            out = self.executor.infer(GrpsMessage(str_data="hi"), context)
            self.assertFalse(context.has_err())

`test_init` loads the project with grps-py's own loader (conf/server.yml, conf/inference.yml, the files
under src/), loads every model, and sets `self.executor`: grps-py's executor behind grps's blocking
`infer(inp, context, model_name=None)`. No server is started.
"""

from __future__ import annotations

import asyncio
import sys
import unittest
from pathlib import Path

from grps_py.codecs.grps_pb import GrpsMessageBridge, message_to_payload, payload_to_message
from grps_py.core.context import GrpsContext
from grps_py.core.errors import ConfigError, ModelError
from grps_py.core.executor import Executor
from grps_py.core.types import InferRequest
from grps_py.project import Project, load_project
from grps_py.protos.grps_pb2 import GrpsMessage

__all__ = ["GrpsTest", "LocalExecutor"]


class LocalExecutor:
    """grps-py's (async) executor behind grps's blocking `Executor.infer`, on a private event loop.

    Model code runs in its model's worker threads as when serving; the loop runs while a call waits.
    """

    def __init__(self, project: Project) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._executor = self._loop.run_until_complete(self._start(project))
        except BaseException:
            self._loop.close()
            raise

    @staticmethod
    async def _start(project: Project) -> Executor:
        executor = Executor(project.server, project.inference, GrpsMessageBridge())
        await executor.start()
        return executor

    def infer(
        self, inp: GrpsMessage, context: GrpsContext, model_name: str | None = None
    ) -> GrpsMessage | None:
        """Runs the default DAG, or the model `model_name` (`name-version`; else the message's `model`).

        As grps's executor: None when the model reported an error on `context` (`has_err()`,
        `get_err_msg()`); any other failure raises."""
        model = model_name or inp.model
        request = InferRequest(message_to_payload(inp), context, model, context.request_id)
        try:
            response = self._loop.run_until_complete(self._executor.infer(request))
        except ModelError:
            if context.has_err():
                return None
            raise
        return payload_to_message(response.payload)

    def close(self) -> None:
        """Stops the models' workers and the private loop."""
        if self._loop.is_closed():
            return
        self._executor.close()
        self._loop.run_until_complete(_cancel_tasks())
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()


async def _cancel_tasks() -> None:
    """Ends what the executor left on the loop (its schedulers' dispatch tasks)."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _alias_imported_sources(src: Path) -> None:
    """The test may have imported src/x.py as `src.x` (grps's template does, to register its models).
    grps-py's loader imports it as `x`: give it that name too, so it is not imported (and registered)
    a second time."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not Path(file).resolve().is_relative_to(src):
            continue
        rel = Path(file).resolve().relative_to(src).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts) or "src"
        sys.modules.setdefault(name, module)


class GrpsTest(unittest.TestCase):
    """Base of a project's unit test, as grps's. `project_dir` is where conf/ and src/ are (grps reads
    them from the working directory, and so does this by default)."""

    executor: LocalExecutor | None = None
    project_dir: str | Path = "."

    def test_init(self) -> None:
        """Loads the project and its models, and sets `self.executor` (closed when the test ends)."""
        root = Path(self.project_dir).resolve()
        _alias_imported_sources(root / "src")
        try:
            project = load_project(root)
        except ConfigError as exc:
            self.fail(f"invalid project {root}: {exc}")  # grps's test_init checks the conf too
        self.executor = LocalExecutor(project)
        self.addCleanup(self.executor.close)
