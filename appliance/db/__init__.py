"""The storage seam and its SQLite implementation: connections, one writer, readers, migrations."""

from appliance.db import generation
from appliance.db.connection import Database, ReadConn, SyncReader, SyncWriter, WriteTx, dumps, loads
from appliance.db.seam import Reader, Store, Writer

__all__ = [
    "Database",
    "ReadConn",
    "Reader",
    "Store",
    "SyncReader",
    "SyncWriter",
    "WriteTx",
    "Writer",
    "dumps",
    "generation",
    "loads",
    "seam",
]
