"""Dynamic batching: concurrent requests run as one batch, and a bad request fails alone."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import httpx

from support import ServerThread


def predict_all(server: ServerThread, texts: list[str]) -> list[httpx.Response]:
    def one(text: str) -> httpx.Response:
        doc = {"model": "batched-1.0", "str_data": text}
        return httpx.post(f"{server.http_url}/grps/v1/infer/predict", json=doc, timeout=30)

    with ThreadPoolExecutor(len(texts)) as pool:
        return list(pool.map(one, texts))


def test_concurrent_requests_share_one_batch(basic_server: ServerThread) -> None:
    sizes = sys.modules["serving_models"].BATCH_SIZES
    sizes.clear()
    # max_batch_size is 4 and the timeout 2 s: four concurrent requests fill one batch at once.
    replies = predict_all(basic_server, ["a", "b", "c", "d"])
    assert [r.json()["str_data"] for r in replies] == ["a!", "b!", "c!", "d!"]
    assert sizes == [4]


def test_one_bad_request_fails_alone(basic_server: ServerThread) -> None:
    replies = predict_all(basic_server, ["a", "bad", "c", "d"])
    assert [r.status_code for r in replies] == [200, 500, 200, 200]
    assert "bad row" in replies[1].json()["status"]["msg"]
    assert [replies[i].json()["str_data"] for i in (0, 2, 3)] == ["a!", "c!", "d!"]
