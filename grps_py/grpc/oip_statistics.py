"""Triton's statistics extension over gRPC: GRPCInferenceService's ModelStatistics, mixed into
`OipService` (grpc/oip_service.py). An empty `name` asks for every model, an empty `version` for every
version; a model or version that is not served answers NOT_FOUND."""

from __future__ import annotations

import grpc

from grps_py.codecs.oip_statistics import encode_statistics
from grps_py.core.executor import Executor
from grps_py.grpc.boundary import rpc_boundary
from grps_py.protos import open_inference_pb2 as pb


class StatisticsRpcs:
    """The statistics rpc; the service it is mixed into gives it `executor` (and its boundary)."""

    executor: Executor

    @rpc_boundary
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: grpc.aio.ServicerContext, rid: str
    ) -> pb.ModelStatisticsResponse:
        return encode_statistics(self.executor.model_statistics(request.name, request.version))
