"""Where folder sources added through the API or the dashboard may point.

HEADWATER_FOLDER_ROOTS names the directories. Unset, the default is the directory serve was started
in, unless that directory is one whose tree a token holder must never index through the server: the
file system root, a home directory itself, or a system directory (then no folder is allowed until the
setting names some). Paths are compared after resolving symlinks and `..`, so neither leads out.
"""

from __future__ import annotations

from pathlib import Path

from headwater.settings import Settings

SETTING = "HEADWATER_FOLDER_ROOTS"
# Trees that hold the system, never documents: nothing under them is a default root.
SYSTEM_TREES = tuple(Path(p) for p in ("/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/usr", "/bin", "/sbin",
                                       "/lib", "/lib32", "/lib64", "/libx32", "/snap"))
# Directories that hold many unrelated trees (other users', other services'): not a default root
# themselves, though a directory below one (a project under /srv, a checkout under a home) is.
SHARED_PARENTS = tuple(Path(p) for p in ("/", "/home", "/root", "/tmp", "/var", "/var/lib", "/srv", "/opt", "/mnt",
                                         "/media"))


def default_roots(cwd: Path, home: Path) -> tuple[list[Path], str]:
    """The default roots for a serve started in `cwd`: ([cwd], "") or ([], why none)."""
    where = cwd.resolve()
    home = home.resolve()
    if where == home or where.parent == Path("/home"):
        return [], f"serve was started in the home directory {where}"
    if where in SHARED_PARENTS:
        return [], f"serve was started in {where}, which holds unrelated directories"
    if any(where == tree or tree in where.parents for tree in SYSTEM_TREES):
        return [], f"serve was started in the system directory {where}"
    return [where], ""


def allowed_roots(settings: Settings, cwd: Path | None = None, home: Path | None = None) -> tuple[list[Path], str]:
    """The directories folder sources may lie under, resolved, and why there are none when there are none."""
    if settings.folder_roots is not None:
        roots = [Path(r).expanduser().resolve() for r in settings.folder_roots]
        return roots, "" if roots else f"{SETTING} is an empty list"
    return default_roots(cwd or Path.cwd(), home or Path.home())


def refusal(path: str, settings: Settings, cwd: Path | None = None, home: Path | None = None) -> str | None:
    """Why a folder source may not point at `path` on this server (None: it may)."""
    roots, why_none = allowed_roots(settings, cwd, home)
    if not roots:
        return (f"folder sources cannot be added on this server: {why_none}; set {SETTING} to the directories "
                "it may index (a JSON list)")
    real = Path(path).expanduser().resolve()
    if any(real == root or root in real.parents for root in roots):
        return None
    return f"is outside the directories this server may index ({', '.join(map(str, roots))}; set by {SETTING})"
