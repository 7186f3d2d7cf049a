"""turnout's side of SGLang's scheduler gRPC protocol: stubs, worker client, request builders.

The protobuf messages themselves are the data (``turnout.wire.pb``); nothing is re-wrapped per
token.
"""

from turnout.wire.client import ClientSettings, GenerateStream, WorkerClient, parse_worker_url
from turnout.wire.errors import (
    CLIENT_ERROR_CODES,
    GRPC_TO_HTTP,
    ClientClosed,
    MalformedResponse,
    StreamRefused,
    WorkerCallError,
    http_status_for,
)
from turnout.wire.proto import common_pb2 as common_pb
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.responses import matched_stop
from turnout.wire.sampling import (
    Constraint,
    ConstraintKind,
    InvalidSamplingParams,
    build_generate_request,
    build_sampling_params,
)
from turnout.wire.server_stream import ServerStream, TokenizerBundle

__all__ = [
    "CLIENT_ERROR_CODES",
    "GRPC_TO_HTTP",
    "ClientClosed",
    "ClientSettings",
    "Constraint",
    "ConstraintKind",
    "GenerateStream",
    "InvalidSamplingParams",
    "MalformedResponse",
    "ServerStream",
    "StreamRefused",
    "TokenizerBundle",
    "WorkerCallError",
    "WorkerClient",
    "build_generate_request",
    "build_sampling_params",
    "common_pb",
    "http_status_for",
    "matched_stop",
    "parse_worker_url",
    "pb",
]
