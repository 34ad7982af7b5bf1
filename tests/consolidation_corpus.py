"""A crafted corpus for consolidation: each relation once, with the answer a careful reader would give.

Every document is short enough to be one chunk. Dates matter to "supersedes", so each document's
modification time is set explicitly.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

VPN = """# Connecting to the VPN

Install the WireGuard client from the software portal, then import the profile that the IT desk
sends you by email. Turn the tunnel on before you open any internal tool; the wiki, the build
dashboards and the staging databases refuse connections from outside it. If the handshake fails,
check that your laptop clock is correct, because the server rejects keys from clients whose clock
drifts, and ask the IT desk to issue a fresh profile when it still fails.
"""

_BACKUP = """# Backups

The database is backed up every night at 2 am to the offsite bucket. Each backup is encrypted with
the operations key and kept for 35 days. A restore drill runs on the first Monday of every month:
the on-call engineer restores the latest backup into a scratch server, runs the consistency checks
and records how long the restore took in the operations log, so that everyone knows the real
recovery time before it is ever needed.
"""
# The same text copied into a wiki page: case, punctuation and one word differ, no number does.
_BACKUP_NEAR = """# Backups

The database is backed up every night at 2 am to the off-site bucket. Every backup is encrypted with
the operations key and kept for 35 days; a restore drill runs on the first Monday of every month:
the on-call engineer restores the latest backup into a scratch server, runs the consistency checks
and records how long the restore took in the operations log so that everyone knows the real
recovery time before it is ever needed.
"""

_EXPENSES_2023 = """# Expense policy

Employees must submit receipts for every expense above 50 euros. Claims are filed in the finance
portal within 30 days of the purchase, and a manager approves each claim before it is paid with
the next salary.
"""
_EXPENSES_2025 = """# Expense policy

Employees must submit receipts for every expense above 25 euros. Claims are filed in the finance
portal within 14 days of the purchase, and a manager approves each claim before it is paid with
the next salary. This version replaces the earlier policy.
"""

_WIFI_NAME = """# Office Wi-Fi

To join the office Wi-Fi, pick the network called Headquarters-Staff and sign in with your company
account. Visitors join the separate Headquarters-Guest Wi-Fi network, which reaches the internet only.
"""
_WIFI_PASSWORD = """# Office Wi-Fi

To join the office Wi-Fi as a visitor, ask the reception desk for the guest password. The guest
Wi-Fi password changes every month and is posted on the intranet front page.
"""

_HOURS_A = """# Office opening hours

The office opens at 8 am and closes at 6 pm from Monday to Friday. The front door stays locked at
the weekend.
"""
_HOURS_B = """# Office opening hours

The office opens at 10 am and closes at 4 pm from Monday to Friday. The front door stays locked at
the weekend.
"""

_BREAD = """# Sourdough bread

Mix flour, water and a ripe starter, rest the dough for an hour, fold it every half hour, then let it
rise overnight in the fridge and bake it in a hot covered pot.
"""
_STARS = """# Observing Jupiter

Through a small telescope the four large moons of Jupiter appear as bright points in a line, and
their positions change from one night to the next.
"""

# (path, text, modification date)
DOCUMENTS: list[tuple[str, str, str]] = [
    ("handbook/vpn.md", VPN, "2024-05-01"),
    ("docs/it/vpn-setup.md", VPN, "2024-06-10"),
    ("handbook/backups.md", _BACKUP, "2024-02-01"),
    ("wiki/ops/backups.md", _BACKUP_NEAR, "2024-02-03"),
    ("policies/expenses-2023.md", _EXPENSES_2023, "2023-01-15"),
    ("policies/expenses-2025.md", _EXPENSES_2025, "2025-03-01"),
    ("handbook/wifi.md", _WIFI_NAME, "2024-09-01"),
    ("wiki/wifi-password.md", _WIFI_PASSWORD, "2024-09-02"),
    ("handbook/hours.md", _HOURS_A, "2024-04-01"),
    ("wiki/hours.md", _HOURS_B, "2024-04-01"),
    ("misc/bread.md", _BREAD, "2024-01-01"),
    ("misc/jupiter.md", _STARS, "2024-01-01"),
]

EXACT = ("handbook/vpn.md", "docs/it/vpn-setup.md")
NEAR = ("handbook/backups.md", "wiki/ops/backups.md")
# The pairs stage 2 should receive, and the answer a careful reader gives.
AMBIGUOUS: dict[tuple[str, str], str] = {
    ("policies/expenses-2023.md", "policies/expenses-2025.md"): "supersedes",
    ("handbook/wifi.md", "wiki/wifi-password.md"): "complementary",
    ("handbook/hours.md", "wiki/hours.md"): "conflicting",
}
NEWER = {("policies/expenses-2023.md", "policies/expenses-2025.md"): "policies/expenses-2025.md"}


def write_corpus(root: Path) -> Path:
    for path, text, date in DOCUMENTS:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        stamp = datetime.fromisoformat(date).replace(tzinfo=timezone.utc).timestamp()
        os.utime(target, (stamp, stamp))
    return root
