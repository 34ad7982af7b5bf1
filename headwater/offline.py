"""Run fully offline: no telemetry, no hub downloads. Must run before unstructured or transformers import."""

from __future__ import annotations

import os

# These libraries read their switches from the environment at import time, so the switches
# are set here, once, rather than passed as settings. setdefault lets a user opt back in.
_OFFLINE_ENV = {
    "DO_NOT_TRACK": "1",  # unstructured phones home on import otherwise
    "UNSTRUCTURED_DISABLE_NOTICE": "1",
    "SCARF_NO_ANALYTICS": "true",
    "ANONYMIZED_TELEMETRY": "False",  # chromadb
    "HF_HUB_OFFLINE": "1",  # models load from installed packages or local paths only
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def enforce_offline() -> None:
    """Set the environment switches that keep third-party libraries from reaching the network."""
    for key, value in _OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


enforce_offline()
