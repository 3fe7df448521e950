"""numpy float32 vectors to and from pgvector's binary format (`uint16 dimensions, uint16 unused, float4[]`,
big-endian): no text formatting of 384 floats per row, and no dependency beyond psycopg."""

from __future__ import annotations

import struct

import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo

from ...lazy import np


class Vector:
    """A value to send as a pgvector `vector` (wraps a numpy array)."""

    __slots__ = ("array",)

    def __init__(self, array) -> None:
        self.array = np.asarray(array, dtype=np.float32).reshape(-1)


def register(conn: psycopg.Connection) -> None:
    """Teach this connection to send `Vector` and read `vector` columns as float32 numpy arrays."""
    info = TypeInfo.fetch(conn, "vector")
    if info is None:
        raise psycopg.errors.UndefinedObject("the pgvector extension is not installed in this database")
    oid = info.oid

    class VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Vector) -> bytes:
            arr = obj.array
            return struct.pack(">HH", arr.shape[0], 0) + arr.astype(">f4").tobytes()

    VectorDumper.oid = oid

    class VectorLoader(Loader):
        format = Format.BINARY

        def load(self, data) -> np.ndarray:
            dims = struct.unpack_from(">H", data)[0]
            return np.frombuffer(bytes(data), dtype=">f4", count=dims, offset=4).astype(np.float32)

    class VectorTextLoader(Loader):
        def load(self, data) -> np.ndarray:
            return np.array(bytes(data)[1:-1].split(b","), dtype=np.float32)

    conn.adapters.register_dumper(Vector, VectorDumper)
    conn.adapters.register_loader(oid, VectorTextLoader)
    conn.adapters.register_loader(oid, VectorLoader)
