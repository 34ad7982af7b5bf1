"""Headwater: keep data sources in sync with a Chroma collection."""

__version__ = "0.1.0"
