"""`gateway policy check DIR` and `gateway policy hash-key`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from policies.auth import hash_key
from policies.loader import check_directory


def add_commands(sub: argparse._SubParsersAction) -> None:
    """The `policy` command and its subcommands."""
    policy = sub.add_parser("policy", help="tenant policy files (see docs/tenants.md)")
    commands = policy.add_subparsers(dest="policy_command", required=True)
    check = commands.add_parser("check", help="validate a policy directory; print every error; exit 1 on any")
    check.add_argument("directory", type=Path)
    commands.add_parser("hash-key", help="read an API key from stdin, print its hex SHA-256 for a policy file")


def run(args: argparse.Namespace) -> int:
    if args.policy_command == "check":
        return check(args.directory)
    return print_hash()


def check(directory: Path) -> int:
    good, errors = check_directory(directory)
    for error in errors:
        print(error, file=sys.stderr)
    tenants = ", ".join(sorted(p.tenant for p in good.values())) or "none"
    print(f"{len(good)} tenants valid ({tenants}); {len(errors)} errors")
    return 1 if errors else 0


def print_hash() -> int:
    key = sys.stdin.readline().rstrip("\r\n")
    if not key:
        print("gateway policy hash-key: no key on stdin", file=sys.stderr)
        return 1
    print(hash_key(key))
    return 0
