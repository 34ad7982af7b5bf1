"""Connectors: one module per source kind. They say what changed; they never parse or embed."""

from connectors.base import build_connector, register_connector, registered_kinds

__all__ = ["build_connector", "register_connector", "registered_kinds"]
