"""The bytes of the sparse RPCs' large messages, as client/internal/sparse_wire.cc writes them.

A PullRequest or PushRequest is its small fields serialised by protobuf, followed by the packed
keys (field 3) and gradients (field 5) appended as length-delimited fields straight from NumPy's
buffers: protobuf merges fields of concatenated messages, so the server parses the result as one
message, and the megabytes of keys and gradients are copied once, into the request. A
PullResponse's rows are read in place from the response's bytes.
"""

import numpy as np

from proto import ps_pb2

from . import errors

KEYS_FIELD = 3
GRADS_FIELD = 5
_PULL_VALUES_FIELD = 1
_PULL_DIM_FIELD = 2

_WIRE_VARINT = 0
_WIRE_FIXED64 = 1
_WIRE_LENGTH_DELIMITED = 2
_WIRE_FIXED32 = 5


def _varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field_header(field, size):
    return _varint((field << 3) | _WIRE_LENGTH_DELIMITED) + _varint(size)


def encode_sparse_request(fields, keys, grads=None):
    """The bytes of a PullRequest (``grads`` None) or PushRequest.

    ``fields``: a PushRequest with the header, table and runs set (a PullRequest's fields are a
    prefix of a PushRequest's). ``keys``: little-endian uint64 array; ``grads``: float32 array,
    C-contiguous (or a list of such arrays, written one after another).
    """
    pieces = [fields.SerializeToString()]
    for field, arrays in ((KEYS_FIELD, keys), (GRADS_FIELD, grads)):
        if arrays is None:
            continue
        if not isinstance(arrays, (list, tuple)):
            arrays = [arrays]
        size = sum(a.nbytes for a in arrays)
        pieces.append(_field_header(field, size))
        pieces.extend(memoryview(np.ascontiguousarray(a)).cast("B") for a in arrays)
    return b"".join(pieces)


def _read_varint(data, at):
    value = 0
    shift = 0
    while shift < 64:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise ValueError("varint too long")


def decode_pull_response(data):
    """(values, dim) of a serialised PullResponse: values a read-only float32 view of ``data``.

    Raises ValueError for bytes that are not a PullResponse.
    """
    at = 0
    values = (0, 0)
    dim = 0
    size = len(data)
    while at < size:
        tag, at = _read_varint(data, at)
        field, wire_type = tag >> 3, tag & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire_type == _WIRE_VARINT:
            value, at = _read_varint(data, at)
            if field == _PULL_DIM_FIELD:
                dim = value
        elif wire_type == _WIRE_FIXED64:
            at += 8
        elif wire_type == _WIRE_FIXED32:
            at += 4
        elif wire_type == _WIRE_LENGTH_DELIMITED:
            length, at = _read_varint(data, at)
            if field == _PULL_VALUES_FIELD:
                values = (at, length)  # the last occurrence of a bytes field wins
            at += length
        else:
            raise ValueError("wire type %d" % wire_type)
        if at > size:
            raise ValueError("field runs past the end")
    begin, length = values
    if length % 4:
        raise ValueError("values of %d bytes are not float32s" % length)
    return np.frombuffer(data, dtype="<f4", count=length // 4, offset=begin), dim


def sparse_fields(header, table, segments):
    """A PushRequest holding the header, table and runs of a request (no keys or gradients)."""
    fields = ps_pb2.PushRequest(table=table)
    fields.header.CopyFrom(header)
    for shard, _, count in segments:
        run = fields.runs.add()
        run.shard = shard
        run.count = count
    return fields


def place_pull_rows(answer, part, dim, rows):
    try:
        values, _ = decode_pull_response(answer)
    except ValueError as e:
        raise errors.InternalError("malformed PullResponse: %s" % e) from None
    if len(values) != part.num_keys * dim:
        raise errors.InternalError("server answered %d floats for %d keys of dim %d" %
                                   (len(values), part.num_keys, dim))
    at = 0
    for _, begin, count in part.segments:
        rows[begin:begin + count] = values[at:at + count * dim].reshape(count, dim)
        at += count * dim


def copy_dense_chunks(name, response, chunk_floats, out):
    if response.total_floats != out.size:
        raise errors.InvalidArgumentError("dense tensor \"%s\" has %d floats, the caller asked "
                                          "for %d" % (name, response.total_floats, out.size))
    for chunk in response.chunks:
        begin = chunk.chunk * chunk_floats
        if begin >= out.size:
            raise errors.InternalError("dense chunk out of range")
        count = min(chunk_floats, out.size - begin)
        if len(chunk.values) != count * 4:
            raise errors.InternalError("dense chunk of unexpected size")
        out[begin:begin + count] = np.frombuffer(chunk.values, dtype="<f4")
