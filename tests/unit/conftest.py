"""unit/: pure decisions, parsing and escaping, at fixed inputs and fixed times.

A test here needs no database server and no daemon: at most a throwaway SQLite file, a
socket on loopback or a subprocess that only parses. Tests that need `db_url` belong in
store/, tests that start `forkq run` or a `forkq` subprocess against a database in
daemon/. No fixture is shared by every unit test; each file keeps its own.
"""
