"""Which schema version a store's paths may count on.

A path that needs what a version added asks `schema_at_least(that version)`: once per
store at its first use (an upgrade applied while the store is open is seen after a
restart), or answered without asking from the version the store, or its master, checked
as the latest (apply_schema, require_latest_schema; a forked child is told its master's).
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class SchemaGates(ABC):
    # The latest version, as checked by this store or its master; None: not checked.
    schema_checked: int | None = None
    _gates: dict[int, bool] | None = None  # {version: reached?}, each asked once

    @abstractmethod
    def schema_version(self) -> int | None:
        """The applied version, or None when forkq's tables do not exist yet."""

    def schema_at_least(self, version: int) -> bool:
        if self.schema_checked is not None:
            return self.schema_checked >= version
        if self._gates is None:
            self._gates = {}
        if version not in self._gates:
            self._gates[version] = (self.schema_version() or 0) >= version
        return self._gates[version]
