"""The directory a worker's pool processes write their metric samples to (prometheus-client multiprocess mode).

Apart from headwater.observability.metrics because it must run before prometheus_client is
imported anywhere in the process: the client picks its storage when it is imported.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path


def prepare_multiprocess_dir(directory: Path | None = None) -> Path:
    """An empty directory for this worker's samples, set in the environment its pool children inherit.

    Must run before prometheus_client is imported anywhere in the process (it reads the variable
    at import), which is why `headwater worker` calls it first.
    """
    if "prometheus_client" in sys.modules and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        raise RuntimeError("prometheus_client was imported before the metrics directory was set; "
                           "call prepare_multiprocess_dir first")
    path = Path(directory) if directory else Path(tempfile.gettempdir()) / f"headwater-metrics-{os.getpid()}"
    shutil.rmtree(path, ignore_errors=True)  # samples of an earlier worker with this pid are not ours
    path.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path
