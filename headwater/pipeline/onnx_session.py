"""An onnxruntime session on the CPU with a fixed number of threads (0: the runtime's choice)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def model_cache_dirs(configured: Path | None = None) -> list[Path]:
    """Where generated model files (exports, builds) are looked for, in order; the first writable one gets a new file.

    By default inside the environment, where the install (which runs `headwater doctor`) makes
    the files and any later user of the environment (a container running as another user) reads
    them; the user's cache directory when the environment is read-only. HEADWATER_ONNX_CACHE_DIR
    (settings.onnx_cache_dir) replaces both.
    """
    if configured:
        return [Path(configured)]
    return [Path(sys.prefix) / "share" / "headwater" / "onnx", Path.home() / ".cache" / "headwater" / "onnx"]


def cpu_session(model_file: Path, threads: int = 0) -> Any:
    """A CPU InferenceSession for `model_file`, fully optimised, quiet, and idle threads that do not spin."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    # Idle pool threads spinning for work would take the cores the other model runs on meanwhile.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
