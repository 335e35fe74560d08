"""Python client of the parameter server: pull and push embedding rows and dense tensors.

    import numpy as np
    import ps_client

    with ps_client.connect("10.0.0.1:7000") as client:
        keys = np.array([3, 7, 3], dtype=np.uint64)
        rows = client.pull("user", keys)          # float32, shape (3, dim)
        client.push("user", keys, -0.1 * rows)    # repeated keys summed, applied exactly once

Needs the stubs generated from proto/ (``bazel build //client/python:ps_client``) on the path:
PYTHONPATH=client/python:bazel-bin/client/python. See client/python/README.md.
"""

from .client import Client, connect
from .options import ClientOptions, DenseUpdate, PushResult
from .push_ticket import PushTicket
from .errors import (DataLossError, DeadlineExceededError, FailedPreconditionError,
                     InternalError, InvalidArgumentError, NotFoundError, PermissionDeniedError,
                     PsError, ResourceExhaustedError, UnauthenticatedError,
                     UnavailableError)

__all__ = [
    "Client", "ClientOptions", "DenseUpdate", "PushResult", "PushTicket", "connect",
    "PsError", "DataLossError", "DeadlineExceededError", "FailedPreconditionError",
    "InternalError", "InvalidArgumentError", "NotFoundError", "PermissionDeniedError",
    "ResourceExhaustedError", "UnauthenticatedError", "UnavailableError",
]
