"""The only user of aiosqlite: connections, one writer, readers, migrations."""

from appliance.db import generation
from appliance.db.connection import Database, ReadConn, SyncReader, WriteTx, dumps, loads

__all__ = ["Database", "ReadConn", "SyncReader", "WriteTx", "dumps", "generation", "loads"]
