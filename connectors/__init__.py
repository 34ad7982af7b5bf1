"""Connectors: one module per source kind. They say what changed; they never parse or embed."""

from connectors.base import (InvalidSource, SourceOptions, build_connector, build_connector_for_url, kind_for_url,
                             register_connector, registered_kinds, source_kind, url_source, validate_options)

__all__ = ["InvalidSource", "SourceOptions", "build_connector", "build_connector_for_url", "kind_for_url",
           "register_connector", "registered_kinds", "source_kind", "url_source", "validate_options"]
