"""Git repositories: one branch of any repository git can fetch, read from a partial clone in a cache directory.

The clone is bare and partial (`--filter=blob:limit=...`): commits and trees come whole, blobs up
to the source's size limit come with each fetch in one pack, and larger blobs are never fetched
(they are reported as skipped). Documents are the branch's files at one commit; a document's
version is its blob id, so a file whose bytes did not change is never read again. Everything is
done by the git CLI; a token reaches git as an HTTP header through GIT_CONFIG_* variables, never
in a URL, a command line, a log line or an error message.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, urlsplit

from pydantic import Field, field_validator

from connectors.base import DocumentStat, EnvName, SourceOptions, register_connector
from connectors.folder import _match
from headwater.errors import ConfigurationError, ListingError, RetryableError, SkippedDocument
from headwater.models import DocumentChange, Op

KIND = "git"
ZERO_COMMIT = "0" * 40
# Trees of other people's code and generated files: listed, then skipped with this reason, so a
# report says why they are missing. A source's `vendored` option replaces the list.
VENDORED = ("vendor/**", "**/vendor/**", "node_modules/**", "**/node_modules/**", "third_party/**",
            "**/third_party/**", "third-party/**", "**/third-party/**", "**/*.min.js", "**/*.min.css",
            "**/package-lock.json", "**/yarn.lock", "**/pnpm-lock.yaml", "**/poetry.lock", "**/Cargo.lock",
            "**/go.sum")
DEFAULT_MAX_FILE_KB = 1024
# git's own test for binary content: a NUL byte in the first 8,000 bytes.
_BINARY_PROBE = 8000
_LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "typescript",
    ".go": "go", ".rs": "rust", ".java": "java", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".cs": "csharp", ".rb": "ruby", ".php": "php", ".swift": "swift", ".kt": "kotlin", ".scala": "scala",
    ".sh": "shell", ".bash": "shell", ".sql": "sql", ".md": "markdown", ".rst": "restructuredtext",
    ".txt": "text", ".html": "html", ".css": "css", ".json": "json", ".yaml": "yaml", ".yml": "yaml",
    ".toml": "toml", ".xml": "xml",
}
_GIT_TIMEOUT_SECONDS = 600


class BranchMissing(ListingError):
    """The branch does not exist on the remote (deleted, or never pushed): nothing is deleted."""


@dataclass(frozen=True)
class FileChange:
    """One path's change between two commits, as git's tree diff reports it (renames paired by blob id)."""

    status: str  # A, M, D, or R (an exact rename: same blob under a new path)
    path: str
    blob: str | None  # the new blob (None for a delete)
    old_path: str | None = None


def parse_git_url(target: str) -> tuple[str, str | None]:
    """`git+URL[#BRANCH]` -> (URL, branch or None)."""
    if not target.startswith("git+"):
        raise ValueError(f"{target} is not a git+URL (for example git+https://github.com/owner/repo#main)")
    url, _, branch = target[len("git+"):].partition("#")
    return url, branch or None


def repository_key(url: str) -> str:
    """A comparable form of a repository address: host/path, lowercase host, no scheme, credentials or .git.

    `https://github.com/o/r.git`, `git@github.com:o/r` and `ssh://git@github.com/o/r` are the same
    repository; a local path or file:// URL is compared by its absolute path.
    """
    url = url.strip()
    scp = re.match(r"^[\w.-]+@([\w.-]+):(?!//)(.+)$", url)  # git@host:owner/repo
    if scp:
        host, path = scp.group(1), scp.group(2)
    elif "://" in url:
        parts = urlsplit(url)
        host, path = (parts.hostname or "").lower(), parts.path
        if parts.scheme == "file":
            host = ""
    else:
        host, path = "", os.path.abspath(url)
    path = path.rstrip("/")
    if path.endswith(".git"):
        path = path[:-4]
    return f"{host.lower()}/{path.strip('/')}" if host else "/" + path.strip("/")


def _check_url(url: str) -> None:
    if url.startswith("-") or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*::", url):
        # An option to git, or a remote helper (ext::, fd::) that runs a command: never a repository.
        raise ConfigurationError("a git source's URL is what `git fetch` takes: https://..., ssh://..., "
                                 "git@host:owner/repo, or a path")
    parts = urlsplit(url) if "://" in url else None
    if parts is not None and (parts.password or (parts.username and parts.scheme in ("http", "https"))):
        # Never echo it: the part before the @ may be the token itself.
        raise ConfigurationError("a git source's URL must not hold credentials; put the token in an environment "
                                 "variable and name it in the source's token_env option")


def _check_branch(branch: str) -> None:
    if not branch or branch.startswith("-") or ".." in branch or any(c.isspace() or c in "~^:?*[\\" for c in branch):
        raise ConfigurationError(f"{branch[:100]!r} is not a branch name")


class GitOptions(SourceOptions):
    """One branch of a repository that `git fetch` can reach. A private repository's token is named by
    the environment variable that holds it (token_env), never written here."""

    runtime = frozenset({"cache_dir"})

    url: str = Field(min_length=1, max_length=2000, description="What `git fetch` takes: https://..., ssh://..., "
                                                                 "git@host:owner/repo, or a path on this machine.")
    branch: str = Field(default="main", max_length=250)
    include: list[str] = Field(default_factory=lambda: ["**"], max_length=100, description="Globs of paths to index.")
    exclude: list[str] = Field(default_factory=list, max_length=100, description="Globs of paths to leave out.")
    vendored: list[str] = Field(default_factory=lambda: list(VENDORED), max_length=200,
                                description="Paths listed but skipped as other people's code or generated files.")
    max_file_kb: int = Field(default=DEFAULT_MAX_FILE_KB, ge=1, le=1024 * 1024,
                             description="Larger files are never fetched (reported as skipped).")
    token_env: EnvName | None = Field(default=None, description="The environment variable holding a token for a "
                                                                "private repository (sent as HTTP basic auth).")
    webhook_secret_env: EnvName | None = Field(default=None, description="The environment variable holding the "
                                                                         "secret GitHub signs push deliveries with.")
    repository: str | None = Field(default=None, max_length=300, description="Its name in chunk metadata "
                                                                             "(default: owner/repo from the URL).")
    web_url: str | None = Field(default=None, max_length=2000, pattern=r"^https?://\S+$",
                                description="Where files are shown on the web (default: GitHub's, for GitHub URLs).")
    commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$",
                               description="Read this commit rather than the branch's newest (a run's pin).")

    @field_validator("url")
    @classmethod
    def _no_credentials(cls, value: str) -> str:
        try:
            _check_url(value.strip())
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        return value.strip()

    @field_validator("branch")
    @classmethod
    def _branch_name(cls, value: str) -> str:
        try:
            _check_branch(value)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        return value


class GitConnector:
    """One branch of a repository. URIs are paths in the repository; versions are blob ids."""

    kind = KIND

    def __init__(self, source_id: str, url: str = "", branch: str = "main", include: Sequence[str] = ("**",),
                 exclude: Sequence[str] = (), vendored: Sequence[str] = VENDORED,
                 max_file_kb: int = DEFAULT_MAX_FILE_KB, token_env: str | None = None,
                 webhook_secret_env: str | None = None, repository: str | None = None, web_url: str | None = None,
                 commit: str | None = None, cache_dir: str | Path | None = None) -> None:
        if not url:
            raise ConfigurationError(f"git source {source_id}: the url option is missing (what `git fetch` takes)")
        _check_url(url)
        _check_branch(branch)
        if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", commit):
            raise ConfigurationError(f"git source {source_id}: commit must be a full 40-character id")
        self.source_id = source_id
        self.url = url
        self.branch = branch
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self.vendored = tuple(vendored)
        self.max_file_kb = int(max_file_kb)
        self.token_env = token_env
        self.webhook_secret_env = webhook_secret_env
        self.repository = repository or _repository_name(url)
        self.web_url = web_url.rstrip("/") if web_url else _github_web_url(url)
        self.commit = commit
        if cache_dir is None:
            from headwater.settings import load_settings

            cache_dir = load_settings().git_cache_dir
        digest = hashlib.sha256(repository_key(url).encode()).hexdigest()[:16]
        self.repo_dir = Path(cache_dir).expanduser().resolve() / f"{re.sub(r'[^A-Za-z0-9._-]', '_', self.repository)[-60:]}-{digest}.git"
        self._commit_time: float | None = None
        self._last: tuple[str, bytes] | None = None  # (uri, bytes) of the last stat, which read the blob

    @classmethod
    def url_options(cls, url: str) -> tuple[str, dict[str, Any]]:
        """`git+URL[#BRANCH]` (the command line's form) -> (the default source id: that text, its options)."""
        repo_url, branch = parse_git_url(url)
        branch = branch or "main"
        return f"git+{repo_url}#{branch}", {"url": repo_url, "branch": branch}

    def spec(self) -> dict:
        """What a worker needs to build the same connector (JSON). The cache directory is each host's own."""
        options: dict[str, Any] = {"url": self.url, "branch": self.branch, "include": list(self.include),
                                   "exclude": list(self.exclude), "vendored": list(self.vendored),
                                   "max_file_kb": self.max_file_kb, "repository": self.repository}
        for name in ("token_env", "webhook_secret_env", "web_url", "commit"):
            if getattr(self, name):
                options[name] = getattr(self, name)
        return {"kind": KIND, "id": self.source_id, "options": options}

    def pinned(self, commit: str) -> GitConnector:
        """The same source read at one commit (a run reads one commit, whatever the branch does meanwhile)."""
        spec = self.spec()["options"]
        spec["commit"] = commit
        return GitConnector(self.source_id, cache_dir=self.repo_dir.parent, **spec)

    def pinned_to_head(self) -> GitConnector:
        """Fetch, then the source at the branch's newest commit."""
        return self.pinned(self.fetch())

    @property
    def cursor(self) -> str | None:
        """The commit this connector reads (the source's cursor once a pass of it is written)."""
        return self.commit

    # Secrets ---------------------------------------------------------------------------------

    def _secret(self, env_name: str | None, what: str) -> str | None:
        if not env_name:
            return None
        from headwater.secrets import secret_from_env

        return secret_from_env(env_name, f"git source {self.source_id}: {what}")

    def webhook_secret(self) -> bytes | None:
        """The secret GitHub signs this repository's deliveries with, or None when the source names none."""
        value = self._secret(self.webhook_secret_env, "webhook_secret_env")
        return value.encode() if value else None

    # Running git -----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never", "LC_ALL": "C"}
        token = self._secret(self.token_env, "token_env")
        if token and urlsplit(self.url).scheme in ("http", "https"):
            env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {_basic_credentials(token)}"})
        return env

    def _git(self, *args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
        try:
            done = subprocess.run(["git", "-C", str(self.repo_dir), *args], input=stdin, capture_output=True,
                                  env=self._env(), timeout=_GIT_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise RetryableError(f"git {args[0]} of {self.url} took longer than {_GIT_TIMEOUT_SECONDS}s") from None
        if check and done.returncode != 0:
            raise ListingError(f"git {args[0]} failed for {self.url}: {self._scrub(done.stderr)}")
        return done

    def _scrub(self, stderr: bytes) -> str:
        """git's last error line, with any trace of the token removed."""
        text = stderr.decode("utf-8", "replace").strip().splitlines()
        line = next((l for l in reversed(text) if l.startswith(("fatal", "error"))), text[-1] if text else "")
        token = self._secret(self.token_env, "token_env")
        if token:  # as given, and as git sends it (the Basic credentials a trace or a proxy may echo)
            line = line.replace(token, "***").replace(_basic_credentials(token), "***")
        return line[:500]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One fetch of a cache at a time, across processes (workers on one host share it)."""
        self.repo_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.repo_dir.with_suffix(".lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _ensure_repository(self) -> None:
        if not (self.repo_dir / "HEAD").exists():
            subprocess.run(["git", "init", "-q", "--bare", str(self.repo_dir)], check=True, capture_output=True)
            self._git("config", "remote.origin.url", self.url)
            self._git("config", "remote.origin.promisor", "true")
        elif self._git("config", "remote.origin.url", check=False).stdout.decode().strip() != self.url:
            self._git("config", "remote.origin.url", self.url)
        self._git("config", "remote.origin.partialclonefilter", self._filter())

    def _filter(self) -> str:
        return f"blob:limit={self.max_file_kb}k"

    def fetch(self) -> str:
        """Bring the branch's newest commit (and its blobs up to the size limit) into the cache; returns its id."""
        with self._locked():
            self._ensure_repository()
            done = self._git("fetch", "-q", "--no-tags", f"--filter={self._filter()}", "origin",
                             f"+refs/heads/{self.branch}:refs/heads/{self.branch}", check=False)
            if done.returncode != 0:
                error = self._scrub(done.stderr)
                if "couldn't find remote ref" in error or "could not find remote ref" in error.lower():
                    raise BranchMissing(f"branch {self.branch} does not exist in {self.url}; nothing was deleted "
                                        "(the collection keeps what it holds)")
                raise ListingError(f"could not fetch {self.url} ({error}); check the URL and, for a private "
                                   "repository, the token named by token_env")
        return self._git("rev-parse", "--verify", f"refs/heads/{self.branch}^{{commit}}").stdout.decode().strip()

    def has_commit(self, commit: str) -> bool:
        if not re.fullmatch(r"[0-9a-f]{40}", commit) or commit == ZERO_COMMIT:
            return False
        if not (self.repo_dir / "HEAD").exists():
            return False
        # rev-list on a missing object fails at once (cat-file would ask the remote for it).
        return self._git("rev-list", "-n", "1", "--no-walk", f"{commit}^{{commit}}", check=False).returncode == 0

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self._git("merge-base", "--is-ancestor", older, newer, check=False).returncode == 0

    def _at(self) -> str:
        """The commit this connector reads, fetched if the cache does not have it yet."""
        if self.commit is None:
            if not (self.repo_dir / "HEAD").exists() or self._git(
                    "rev-parse", "--verify", "-q", f"refs/heads/{self.branch}", check=False).returncode != 0:
                self.commit = self.fetch()
            else:
                self.commit = self._git("rev-parse", f"refs/heads/{self.branch}").stdout.decode().strip()
        elif not self.has_commit(self.commit):
            self.fetch()
            if not self.has_commit(self.commit):
                with self._locked():
                    self._git("fetch", "-q", "--no-tags", f"--filter={self._filter()}", "origin", self.commit,
                              check=False)
                if not self.has_commit(self.commit):
                    raise RetryableError(f"commit {self.commit[:12]} of {self.url} could not be fetched (force-pushed "
                                         "away?); the next push or full sync catches up")
        return self.commit

    # Matching --------------------------------------------------------------------------------

    def wants(self, uri: str) -> bool:
        return not any(_match(uri, p) for p in self.exclude) and any(_match(uri, p) for p in self.include)

    def _vendored(self, uri: str) -> bool:
        return any(_match(uri, p) for p in self.vendored)

    # Lister ----------------------------------------------------------------------------------

    def list_documents(self) -> Iterator[DocumentChange]:
        """Every wanted file of the branch at this connector's commit (fetched first when not pinned)."""
        if self.commit is None:
            self.commit = self.fetch()
        commit = self._at()
        # -l adds each blob's size (from the object store, no content read): fleet runs go largest first.
        listing = self._git("ls-tree", "-r", "-l", "-z", "--full-tree", commit).stdout
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            meta, _, raw_path = entry.partition(b"\t")
            mode, kind, blob, size = meta.decode().split()
            path = raw_path.decode("utf-8", "surrogateescape")
            # Symbolic links and submodules are not files of this repository.
            if kind != "blob" or mode == "120000" or not self.wants(path):
                continue
            yield DocumentChange(self.source_id, path, Op.UPSERT, version=blob, size=int(size))

    def changes_between(self, before: str, after: str) -> list[FileChange]:
        """What a push changed: git's tree diff of two commits, exact renames paired by blob id."""
        raw = self._git("diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", before, after).stdout
        fields = raw.split(b"\0")
        added: dict[str, list[str]] = {}  # blob -> paths added with it
        changes: list[FileChange] = []
        deleted: list[tuple[str, str]] = []  # (path, old blob)
        i = 0
        while i + 1 < len(fields):
            header, path = fields[i].decode(), fields[i + 1].decode("utf-8", "surrogateescape")
            i += 2
            if not header.startswith(":"):
                continue
            old_mode, new_mode, old_blob, new_blob, status = header[1:].split()
            old_file = old_mode not in ("000000", "120000", "160000")
            new_file = new_mode not in ("000000", "120000", "160000")
            if new_file and status != "D":
                if self.wants(path):
                    changes.append(FileChange("A" if not old_file else "M", path, new_blob))
                    added.setdefault(new_blob, []).append(path)
                elif old_file:
                    changes.append(FileChange("D", path, None))
            elif old_file:
                deleted.append((path, old_blob))
        # A deleted path whose exact bytes were added elsewhere is a rename.
        renamed = {}
        for path, blob in deleted:
            targets = added.get(blob)
            if targets:
                renamed[targets.pop(0)] = path
            changes.append(FileChange("D", path, None))
        return [FileChange("R", c.path, c.blob, renamed[c.path]) if c.status == "A" and c.path in renamed else c
                for c in changes]

    def document_changes(self, file_changes: list[FileChange], sequence: str) -> list[DocumentChange]:
        """Live changes for a push: upserts carry their blob id as version; a rename is a delete and an upsert."""
        result = []
        for change in file_changes:
            op = Op.DELETE if change.status == "D" else Op.UPSERT
            result.append(DocumentChange(self.source_id, change.path, op, version=change.blob, sequence=sequence))
        return result

    # Reader ----------------------------------------------------------------------------------

    def _blob_of(self, uri: str) -> str:
        listed = self._git("ls-tree", "-z", self._at(), "--", uri).stdout.split(b"\0")[0]
        if not listed:
            raise FileNotFoundError(uri)
        mode, kind, blob = listed.partition(b"\t")[0].decode().split()
        if kind == "tree":
            raise IsADirectoryError(uri)
        if kind != "blob" or mode == "120000":
            raise FileNotFoundError(uri)  # a submodule or link is not a file of this repository
        return blob

    def stat(self, uri: str) -> DocumentStat:
        """Size, blob id and metadata of a file at this commit; vendored, oversized and binary files are skipped."""
        if self._vendored(uri):
            raise SkippedDocument("vendored or generated file (a `vendored` pattern of this git source matches it); "
                                  "set the source's vendored option to index it")
        blob = self._blob_of(uri)
        # The partial clone holds every blob up to the limit; a missing one is larger (never fetched).
        if self._git("rev-list", "--objects", "--missing=print", blob, check=False).returncode != 0:
            raise SkippedDocument(f"larger than this git source's max_file_kb ({self.max_file_kb} KB); raise "
                                  "max_file_kb in the source's options to index it")
        data = self._git("cat-file", "blob", blob).stdout
        if len(data) > self.max_file_kb * 1024:
            raise SkippedDocument(f"{len(data) // 1024} KB is larger than this git source's max_file_kb "
                                  f"({self.max_file_kb} KB); raise max_file_kb in the source's options to index it")
        if b"\0" in data[:_BINARY_PROBE]:
            raise SkippedDocument("binary file (a NUL byte in its first 8,000 bytes, git's own test)")
        self._last = (uri, data)
        return DocumentStat(size=len(data), modified_time=self._time(), version=blob, url=self.link(uri),
                            metadata=self.metadata(uri))

    def read(self, uri: str, limit: int) -> bytes:
        if self._last is not None and self._last[0] == uri:
            return self._last[1][:limit]
        return self._git("cat-file", "blob", self._blob_of(uri)).stdout[:limit]

    def _time(self) -> float:
        if self._commit_time is None:
            self._commit_time = float(self._git("show", "-s", "--format=%ct", self._at()).stdout.decode().strip()
                                      or time.time())
        return self._commit_time

    def link(self, uri: str) -> str | None:
        """The file at this commit on the hosting site (GitHub, or the source's web_url), when there is one."""
        if not self.web_url:
            return None
        return f"{self.web_url}/blob/{self._at()}/{quote(uri)}"

    def metadata(self, uri: str) -> dict[str, Any]:
        return {"repository": self.repository, "commit": self._at(), "branch": self.branch,
                "language": _LANGUAGES.get(PurePosixPath(uri).suffix.lower())}


def _repository_name(url: str) -> str:
    """owner/repo for hosted repositories; the last path part for a local one."""
    key = repository_key(url)
    parts = [p for p in key.split("/") if p]
    hosted = ("://" in url and urlsplit(url).scheme != "file") or re.match(r"^[\w.-]+@", url)
    return "/".join(parts[-2:]) if hosted else (parts[-1] if parts else url)


def _github_web_url(url: str) -> str | None:
    key = repository_key(url)
    if key.startswith("github.com/"):
        return "https://" + key
    return None


register_connector(KIND, GitConnector, GitOptions, url_schemes=("git+https", "git+http", "git+ssh", "git+file", "git+git"))


def _basic_credentials(token: str) -> str:
    """The Basic-auth credentials git sends for a token: GitHub, GitHub Enterprise and GitLab all
    accept a token as the password."""
    return base64.b64encode(f"x-access-token:{token}".encode()).decode()
