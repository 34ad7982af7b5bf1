"""Connectors: one module per source kind. They say what changed; they never parse or embed."""

from connectors.base import (build_connector, build_connector_for_url, kind_for_url, register_connector,
                             registered_kinds)

__all__ = ["build_connector", "build_connector_for_url", "kind_for_url", "register_connector", "registered_kinds"]
