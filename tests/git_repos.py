"""Real git repositories for tests: a bare "remote" on disk, a working clone that pushes to it, and
webhook deliveries in GitHub's payload format and headers, signed as GitHub signs them."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import uuid
from pathlib import Path

_IDENTITY = ["-c", "user.name=Headwater Tests", "-c", "user.email=tests@headwater.invalid", "-c", "commit.gpgsign=false"]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *_IDENTITY, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip()


class Repository:
    """A bare repository (the remote, fetched by path or file:// URL) and a clone to commit and push from."""

    def __init__(self, root: Path, name: str = "handbook") -> None:
        self.bare = root / f"{name}.git"
        self.work = root / f"{name}-work"
        root.mkdir(parents=True, exist_ok=True)
        git(root, "init", "-q", "--bare", "-b", "main", str(self.bare))
        git(root, "init", "-q", "-b", "main", str(self.work))
        git(self.work, "remote", "add", "origin", str(self.bare))
        self.url = f"file://{self.bare}"
        self.name = name

    def write(self, path: str, text: str | bytes) -> None:
        target = self.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.write_bytes if isinstance(text, bytes) else target.write_text)(text)

    def remove(self, path: str) -> None:
        git(self.work, "rm", "-q", path)

    def move(self, old: str, new: str) -> None:
        (self.work / new).parent.mkdir(parents=True, exist_ok=True)
        git(self.work, "mv", old, new)

    def head(self, branch: str = "main") -> str:
        return git(self.bare, "rev-parse", f"refs/heads/{branch}")

    def commit_and_push(self, message: str, branch: str = "main", force: bool = False) -> tuple[str, str]:
        """Commit everything in the work tree and push it; returns GitHub's (before, after) for the push."""
        before = self.head(branch) if git(self.bare, "branch", "--list", branch) else "0" * 40
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "--allow-empty", "-m", message)
        git(self.work, "push", "-q", *(["--force"] if force else []), "origin", f"HEAD:refs/heads/{branch}")
        return before, self.head(branch)

    def reset_hard(self, commit: str) -> None:
        git(self.work, "reset", "-q", "--hard", commit)

    def files(self) -> dict[str, bytes]:
        """path -> bytes of every file at the remote's main."""
        listing = git(self.bare, "ls-tree", "-r", "--name-only", "main").splitlines()
        return {p: subprocess.run(["git", "cat-file", "blob", f"main:{p}"], cwd=self.bare, capture_output=True,
                                  check=True).stdout for p in listing}


def push_payload(repository: Repository, before: str, after: str, ref: str = "refs/heads/main", *,
                 forced: bool = False, deleted: bool = False, full_name: str | None = None) -> dict:
    """A push event's body, with the fields GitHub sends (commits trimmed: Headwater diffs in git itself)."""
    zero = "0" * 40
    return {
        "ref": ref, "before": before, "after": after, "created": before == zero, "deleted": deleted,
        "forced": forced, "base_ref": None, "compare": f"https://github.com/tests/{repository.name}/compare",
        "commits": [], "head_commit": None if deleted else {"id": after, "message": "change"},
        "repository": {"id": 1, "name": repository.name, "full_name": full_name or f"tests/{repository.name}",
                       "clone_url": repository.url, "html_url": f"https://github.com/tests/{repository.name}",
                       "default_branch": "main", "private": False},
        "pusher": {"name": "tests", "email": "tests@headwater.invalid"}, "sender": {"login": "tests"},
    }


def ping_payload(repository: Repository) -> dict:
    return {"zen": "Keep it logically awesome.", "hook_id": 1,
            "hook": {"type": "Repository", "events": ["push"], "config": {"content_type": "json"}},
            "repository": push_payload(repository, "0" * 40, "0" * 40)["repository"]}


def delivery(payload: dict, secret: str | None, event: str = "push", delivery_id: str | None = None,
             signature: str | None = None) -> tuple[bytes, dict[str, str]]:
    """(body, headers) as GitHub sends them: raw JSON bytes, signed with HMAC-SHA256 (and SHA-1) of those bytes."""
    body = json.dumps(payload, indent=2).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/044aadd",
               "X-GitHub-Event": event, "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
               "X-GitHub-Hook-ID": "1", "X-GitHub-Hook-Installation-Target-Type": "repository"}
    if secret is not None:
        headers["X-Hub-Signature"] = "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
        headers["X-Hub-Signature-256"] = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    return body, headers
