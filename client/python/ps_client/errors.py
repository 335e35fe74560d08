"""Exceptions of the Python client: one per gRPC status code, each carrying the code and message.

Errors of the servers and the coordinator arrive as gRPC statuses; the client raises them as
``PsError`` subclasses with the same code (``e.code`` is a ``grpc.StatusCode``) and message, so
``except ps_client.UnavailableError`` or ``e.code == grpc.StatusCode.UNAVAILABLE`` both work.
Input the client refuses before anything is sent raises the same classes (``InvalidArgumentError``
is also a ``ValueError``, ``NotFoundError`` a ``LookupError``).
"""

import grpc


class PsError(Exception):
    """An error of the parameter server or of the client, with its gRPC status code."""

    code = grpc.StatusCode.UNKNOWN
    # A push (or retry_push) that failed after its requests were sent: its PushTicket, for
    # Client.retry_push (some servers may have applied their parts). None otherwise.
    push_ticket = None

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self):
        return "%s: %s" % (self.code.name, self.message)


class InvalidArgumentError(PsError, ValueError):
    """Input refused: wrong shapes or types, NaN or Inf gradients, sizes that disagree."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(PsError, LookupError):
    """An unknown table, a dense tensor never pushed, an unknown member."""
    code = grpc.StatusCode.NOT_FOUND


class FailedPreconditionError(PsError):
    """A shard the server does not own with no newer map to follow, or a call out of order."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class UnavailableError(PsError):
    """A server or the coordinator could not be reached before the call's retry timeout."""
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(PsError):
    """A request ran past its deadline, retried until the call's retry timeout."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class PermissionDeniedError(PsError):
    """The server refused the caller (e.g. a worker id the coordinator never issued)."""
    code = grpc.StatusCode.PERMISSION_DENIED


class UnauthenticatedError(PsError):
    """The call carried no bearer token, or one the cluster does not accept (token_file)."""
    code = grpc.StatusCode.UNAUTHENTICATED


class ResourceExhaustedError(PsError):
    """A request over the server's limits."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class DataLossError(PsError):
    """A shard lost every copy; its rows come back only from a checkpoint."""
    code = grpc.StatusCode.DATA_LOSS


class InternalError(PsError):
    """A broken invariant: a malformed answer, an inconsistent shard map."""
    code = grpc.StatusCode.INTERNAL


_BY_CODE = {
    cls.code: cls
    for cls in (InvalidArgumentError, NotFoundError, FailedPreconditionError, UnavailableError,
                DeadlineExceededError, PermissionDeniedError, UnauthenticatedError,
                ResourceExhaustedError,
                DataLossError, InternalError)
}


def error_for(code, message):
    """The PsError subclass instance for a ``grpc.StatusCode`` and message."""
    return _BY_CODE.get(code, PsError)(message, code)


def from_rpc_error(error, what=""):
    """Converts a ``grpc.RpcError`` (a failed call) to a PsError; ``what`` prefixes the message."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    message = details or (code.name if code is not None else "unknown error")
    if what:
        message = "%s: %s" % (what, message)
    return error_for(code or grpc.StatusCode.UNKNOWN, message)
