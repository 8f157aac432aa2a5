"""``specchat profiles [list | show NAME | check [PATH...]]``."""

from __future__ import annotations

import argparse
import json
import sys

from specchat.config import load_all_profiles, load_profile
from specchat.errors import SpecchatError
from specchat.sanitize import clean_line

SHARED = ()


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "profiles", help="list, show or check profiles",
        description="Profiles are TOML files: shipped ones, plus your own in the config dir's profiles/ "
        "(same name overrides). `check` with no path checks all of them.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="the available profiles (default action)")
    show = actions.add_parser("show", help="a profile with 'extends' applied, as TOML-like text or JSON")
    show.add_argument("name", help="profile name or path")
    show.add_argument("--json", action="store_true", help="print JSON")
    check = actions.add_parser("check", help="validate profiles; exit 2 if any is bad")
    check.add_argument("paths", nargs="*", help="profile names or files (default: all available)")
    return parser


def run(args: argparse.Namespace) -> int:
    action = args.action or "list"
    if action == "show":
        return _show(args.name, args.json)
    if action == "check":
        return _check(args.paths)
    return _list()


def _list() -> int:
    from specchat import paths

    loaded, failed = load_all_profiles()
    user_dir = paths.user_profiles_dir()
    for profile in loaded:  # a profile is someone's file: its text is shown inert
        where = "user" if profile.source_path and user_dir in profile.source_path.parents else "shipped"
        print(f"{clean_line(profile.name):<18} {where:<8} {clean_line(profile.description)}")
    for error in failed:
        print(f"{'(invalid)':<18} {'':<8} {error}")
    print(f"\nuser profiles: {user_dir}", file=sys.stderr)
    return 2 if failed else 0


def _show(name: str, as_json: bool) -> int:
    data = load_profile(name).to_dict()
    if as_json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"# {clean_line(data.pop('name'))} — {clean_line(data.pop('source_path'))}")  # values below: json.dumps escapes
    _print_table(data, ())
    return 0


def _print_table(data: dict, where: tuple) -> None:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    for key, value in scalars.items():
        print(f"{key} = {'(unset)' if value is None else json.dumps(value)}")
    for key, value in data.items():
        if isinstance(value, dict):
            print(f"\n[{'.'.join(where + (key,))}]")
            _print_table(value, where + (key,))


def _check(refs: list[str]) -> int:
    loaded, failed = load_all_profiles(refs)
    for profile in loaded:
        print(f"ok     {profile.name} ({profile.source_path})")
    if refs:  # a server profile named here is also asked what it serves
        failed += _check_servers(loaded)
    for error in failed:
        print(f"specchat: error: {error}", file=sys.stderr)
    return 2 if failed else 0


def _check_servers(profiles) -> list:
    """One line per remote profile: what its server serves and how it speculates."""
    from specchat.remote import is_remote, open_chat, support_line

    failed = []
    for profile in profiles:
        if not is_remote(profile):
            continue
        try:
            _chat, info = open_chat(profile)
        except SpecchatError as error:
            failed.append(error)
            continue
        print(clean_line(f"server {profile.name}: {support_line(info)}"))
    return failed
