"""The native environment an environment class wraps, and its ``close``."""

from __future__ import annotations

from typing import Any


class NativeHandle:
    """Holds the native (Rust) environment as ``_native`` until ``close()``.

    ``close()`` drops it, and with it the SUMO process, its TraCI port and its temporary
    folder (Python frees the native object at once unless someone else holds it); any
    later call raises ``RuntimeError`` instead of simulating on.
    """

    _native_env: Any = None

    @property
    def _native(self) -> Any:
        native = self._native_env
        if native is None:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        return native

    @_native.setter
    def _native(self, native: Any) -> None:
        self._native_env = native

    def close(self) -> None:
        self._native_env = None
