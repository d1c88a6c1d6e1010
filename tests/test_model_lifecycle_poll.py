"""model_control: poll: the server applies inference.yml, and the model files it names, when they change;
what cannot be applied is logged and the models served stay as they were."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from support import PROJECTS, start_project

LIFECYCLE = PROJECTS / "lifecycle"
X = np.arange(8, dtype=np.float32).reshape(2, 4)


class Polled:
    """The lifecycle project served from copies of its conf files and its model file, in a directory the
    test may change."""

    def __init__(self, folder: Path) -> None:
        self.inference_yml = folder / "inference.yml"
        self.factor = folder / "factor.txt"
        self.factor.write_text("2\n")
        server_yml = folder / "server.yml"
        settings = yaml.safe_load((LIFECYCLE / "conf" / "server.yml").read_text())
        server_yml.write_text(yaml.safe_dump({**settings, "model_control": "poll", "repository_poll_s": 0.1}))
        self.config = yaml.safe_load((LIFECYCLE / "conf" / "inference.yml").read_text())
        self.config["models"][0]["inferer_path"] = str(self.factor)
        self.write(self.config)
        self.server = start_project(LIFECYCLE, inference_conf=self.inference_yml, server_conf=server_yml)
        self.url = self.server.http_url

    def write(self, config: dict[str, Any]) -> None:
        self.inference_yml.write_text(yaml.safe_dump(config, sort_keys=False))

    def answer(self, model: str) -> httpx.Response:
        body = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": X.ravel().tolist()}]}
        return httpx.post(f"{self.url}/v2/models/{model}/infer", json=body, timeout=30)

    def index(self) -> list[dict[str, str]]:
        return httpx.post(f"{self.url}/v2/repository/index").json()  # type: ignore[no-any-return]


@pytest.fixture
def polled(tmp_path: Path) -> Iterator[Polled]:
    made = Polled(tmp_path)
    yield made
    made.server.stop()


def eventually(check: Callable[[], bool], timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the change was not applied in time"
        time.sleep(0.05)


def scaled_by(polled: Polled, factor: float) -> bool:
    reply = polled.answer("scale")
    return reply.status_code == 200 and reply.json()["outputs"][0]["data"] == (X * factor).ravel().tolist()


def test_a_changed_model_file_is_reloaded(polled: Polled) -> None:
    assert scaled_by(polled, 2)
    polled.factor.write_text("3.0\n")
    eventually(lambda: scaled_by(polled, 3))


def test_models_added_to_and_removed_from_inference_yml_follow(polled: Polled) -> None:
    config = polled.config
    triple = {**config["models"][0], "name": "triple", "version": "5"}
    config["models"].append(triple)
    polled.write(config)
    eventually(lambda: polled.answer("triple").status_code == 200)
    config["models"].pop()
    polled.write(config)
    eventually(lambda: polled.answer("triple").status_code == 404)
    assert {"name": "triple", "version": "5", "state": "UNAVAILABLE", "reason": "unloaded"} in polled.index()


def test_a_dag_and_its_models_change_together(polled: Polled) -> None:
    config = polled.config
    config["models"][1]["version"] = "2"  # plus-1 becomes plus-2, and the DAG runs it
    config["dag"]["nodes"][1]["model"] = "plus-2"
    polled.write(config)
    eventually(lambda: any(m["name"] == "plus" and m["version"] == "2" for m in polled.index()))
    chain = polled.answer("chain")
    assert chain.status_code == 200 and chain.json()["outputs"][0]["data"] == (X * 2 + 1).ravel().tolist()


def test_what_cannot_be_applied_leaves_the_models_as_they_were(
    polled: Polled, caplog: pytest.LogCaptureFixture
) -> None:
    polled.inference_yml.write_text("models: [\n")  # not YAML
    polled.factor.write_text("3\n")
    eventually(lambda: "cannot be read" in caplog.text)
    assert scaled_by(polled, 2)
    polled.write(polled.config)  # valid again: the file changed since, so the model is reloaded
    eventually(lambda: scaled_by(polled, 3))
    polled.factor.write_text("not a number\n")
    eventually(lambda: "applying it failed" in caplog.text)
    assert scaled_by(polled, 3)
    (scale,) = [m for m in polled.index() if m["name"] == "scale"]
    assert scale["state"] == "READY" and scale["reason"].startswith("a new load failed")


def test_the_repository_api_does_not_load_in_poll_mode(polled: Polled) -> None:
    reply = httpx.post(f"{polled.url}/v2/repository/models/scale/load")
    assert reply.status_code == 501 and "inference.yml is watched instead" in reply.json()["error"]
