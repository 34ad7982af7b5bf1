"""Every command in README.md, as a reader would type it.

The quickstart's sync and query, and the tour's folder commands, run for real against the sample
folder (into a temporary Chroma directory). Commands that need an outside service (S3, GitHub, a
website, Redis, a Chroma server) or never end (`watch`, `serve`, `worker`, `beat`) are checked
against their command's `--help`: the command exists and takes every option the README gives it.
The Python block runs (TOML blocks are loaded as `headwater.toml` by tests/unit/test_docs.py). A command this test
does not know how to check fails it: add it to NOT_RUN with the reason, or make it runnable.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
# The sample question of the quickstart, and the document that answers it.
SAMPLE_ANSWER = "ops/runbook.md"

# First words of commands the test does not run, and why.
NOT_RUN = {
    "scripts/install.sh": "the install itself: this test runs in the virtualenv it made, and CI runs it from scratch",
    "chroma": "starts a Chroma server that runs until stopped (the fleet's integration tests start one)",
    "export": "only sets environment variables for the commands after it",
    "source": "activates the virtualenv this test already runs in",
}
# Whole commands the test does not run, and why.
NOT_RUN_COMMANDS = {
    ".venv/bin/python -m pytest": "the whole test suite, of which this test is a part",
}
# headwater commands that run for real when every argument is local (no URL, no absolute path, no --fleet).
RUNNABLE = {"sync", "query", "status"}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)]


def shell_commands(body: str) -> list[str]:
    """A shell block's commands: continuation lines joined, blank lines and comment lines dropped."""
    commands, pending = [], ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = (pending + line).strip()
        pending = ""
        if command and not command.startswith("#"):
            commands.extend(part.strip() for part in command.split(" && "))
    return commands


def words(command: str) -> list[str]:
    """The command's words as the shell splits them, without a trailing comment (a word that starts with #)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=False)
    lexer.whitespace_split, lexer.commenters = True, ""
    split = list(lexer)
    cut = next((i for i, word in enumerate(split) if word.startswith("#")), len(split))
    return split[:cut]


def plan(command: str) -> str:
    """How a command is checked: "run", "help", or "skip: <why>"; ValueError for a command nobody accounted for."""
    argv = words(command)
    if command in NOT_RUN_COMMANDS:
        return f"skip: {NOT_RUN_COMMANDS[command]}"
    if argv[0] in NOT_RUN:
        return f"skip: {NOT_RUN[argv[0]]}"
    if argv[0] in ("headwater", ".venv/bin/headwater"):
        local = all(not re.match(r"(\w[\w+]*://|/)", arg) for arg in argv[2:]) and "--fleet" not in argv
        return "run" if argv[1] in RUNNABLE and local else "help"
    raise ValueError(f"README command {command!r} is neither run nor checked: make it runnable here, "
                     "or add its first word to NOT_RUN with the reason")


def _headwater(args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "headwater"), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env)


def test_every_readme_block_is_checked(tmp_path):
    env = {**os.environ, "HEADWATER_CHROMA_PATH": str(tmp_path / "chroma"), "HEADWATER_CONFIG_FILE":
           str(tmp_path / "absent.toml"), "COLUMNS": "250", "NO_COLOR": "1", "TERM": "dumb"}
    helps: dict[str, str] = {}
    ran, checked, skipped = [], [], []
    blocks = fenced_blocks(README.read_text(encoding="utf-8"))
    assert any(language == "bash" for language, _ in blocks), "README.md has no shell blocks: the parser is wrong"
    for language, body in blocks:
        if language == "toml":
            skipped.append("toml block: tests/unit/test_docs.py loads every TOML example as a headwater.toml")
        elif language == "python":
            done = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=300,
                                  cwd=ROOT, env=env)
            assert done.returncode == 0, f"README's Python block failed:\n{done.stderr[-3000:]}"
            assert SAMPLE_ANSWER in done.stdout, done.stdout
            ran.append("python block")
        elif language in ("bash", "sh", "shell"):
            for command in shell_commands(body):
                how = plan(command)
                argv = words(command)
                if how == "run":
                    done = _headwater(argv[1:], env)
                    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stderr[-3000:]}"
                    if argv[1] == "query":
                        assert SAMPLE_ANSWER in done.stdout, f"{command} did not find the sample answer:\n{done.stdout}"
                    ran.append(command)
                elif how == "help":
                    _check_against_help(argv, helps, env)
                    checked.append(command)
                else:
                    skipped.append(command)
        else:
            assert language in ("", "text"), f"README block in {language!r}: teach this test to check it"
    # The quickstart's two real commands, at least, ran.
    assert any(c.split()[1:3] == ["sync", "examples/docs"] for c in ran), ran
    assert any(" query " in f" {c} " for c in ran), ran
    print(f"ran {len(ran)}, checked against --help {len(checked)}, skipped {len(skipped)}: {skipped}")


def _check_against_help(argv: list[str], helps: dict[str, str], env: dict) -> None:
    """The subcommand exists and every option the README gives it appears in its --help."""
    command = argv[1]
    if command not in helps:
        shown = _headwater([command, "--help"], env, timeout=120)
        assert shown.returncode == 0, f"`headwater {command} --help` failed: {shown.stderr[-2000:]}"
        helps[command] = shown.stdout
    for option in (arg.split("=", 1)[0] for arg in argv[2:] if arg.startswith("-")):
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", helps[command]), \
            f"README gives `headwater {command}` the option {option}, which its --help does not list"


def test_a_command_nobody_accounted_for_fails_the_check():
    with pytest.raises(ValueError, match="neither run nor checked"):
        plan("rm -rf build")
    assert plan("headwater sync git+https://github.com/owner/repo#main") == "help"
    assert plan("headwater sync examples/docs  # a comment") == "run"
    assert words("headwater sync git+https://github.com/o/r#main   # the branch") == \
        ["headwater", "sync", "git+https://github.com/o/r#main"]
