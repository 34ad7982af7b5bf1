"""CPU seconds of processes and their descendants, read from /proc (Linux), to see where a run's CPU went.

Wall time on a shared machine says little; CPU time per process says which process did the work
(a worker's model, the Chroma server, Redis) whatever else ran on the cores meanwhile.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process itself and of its children it reaped)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return int(fields[1]), (utime + stime + cutime + cstime) / _TICKS


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of `root` and every live descendant (reaped ones count through their parent)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = found
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
            todo.extend(children.get(pid, ()))
    return total


def children_cpu_seconds() -> dict[int, float]:
    """This process's direct children (pid -> CPU seconds of each one's tree)."""
    mine = os.getpid()
    pids = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]
    return {pid: tree_cpu_seconds(pid) for pid in pids if (found := _stat(pid)) is not None and found[0] == mine}


def command_name(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in argv if w]
    for known in ("redis-server", "chroma"):
        # redis-server rewrites its title ("/usr/bin/redis-server 127.0.0.1:6379"): look at the first word
        if any(Path(w.split()[0]).name == known for w in words[:2]):
            return known
    return " ".join(words[2:6]) if len(words) > 2 else " ".join(words)
