"""Finding, reading and merging profile files: the shipped ones (the package's, or a checkout's
``profiles/``), and the user's in ``<config dir>/profiles``, which override them by name.
"""

from __future__ import annotations

import re
from pathlib import Path

from .. import paths, untrusted
from ..errors import ProfileError, SpecchatError
from .model import Profile
from .schema import build_profile, check_keys, did_you_mean

DEFAULT_PROFILE = "default"


def profile_files() -> dict[str, Path]:
    """Every available profile by name; user files override shipped ones."""
    found: dict[str, Path] = {}
    for directory in (paths.shipped_profiles_dir(), paths.user_profiles_dir()):
        if directory.is_dir():
            for file in sorted(directory.glob("*.toml")):
                found[file.stem] = file
    return dict(sorted(found.items()))


def looks_like_path(name_or_path: str | Path) -> bool:
    text = str(name_or_path)
    return isinstance(name_or_path, Path) or "/" in text or "\\" in text or text.endswith(".toml")


def find_profile(name_or_path: str | Path) -> Path:
    """The file for a profile name or path; unknown names get a did-you-mean."""
    if looks_like_path(name_or_path):
        path = Path(name_or_path).expanduser()
        if path.is_dir():
            raise ProfileError("is a directory, not a profile file", file=path,
                               hint="give the .toml file itself, or a profile name (see `specchat profiles list`)")
        if not path.is_file():
            there = path.exists() or path.is_symlink()  # a device, a pipe, a link that leads nowhere
            raise ProfileError("is not a regular file" if there else "profile file not found", file=path,
                               hint="check the path, or give a profile name (see `specchat profiles list`)")
        return path
    files = profile_files()
    if name_or_path in files:
        return files[name_or_path]
    hint = did_you_mean(name_or_path, files) or ""
    available = "available: " + ", ".join(files) if files else "no profiles found"
    raise ProfileError(f"unknown profile '{name_or_path}'", key="--profile",
                       hint=f"{hint} ({available})" if hint else available)


def load_profile(name_or_path: str | Path = DEFAULT_PROFILE) -> Profile:
    """Load, merge (``extends``) and validate one profile; raises ProfileError."""
    file = find_profile(name_or_path)
    merged = _read_chain(file, ())
    # the line of a key is looked up only for an error, so the file is read again then
    return build_profile(file.stem, merged, file, lambda key_path: find_key_line(_read_text(file), key_path))


def load_all_profiles(refs: list[str] | None = None) -> tuple[list[Profile], list[SpecchatError]]:
    """``refs`` (names or paths; default: every available profile) as (loaded, failed): one bad
    file never hides the others."""
    loaded, failed = [], []
    for ref in refs or profile_files().values():
        try:
            loaded.append(load_profile(ref))
        except SpecchatError as error:
            failed.append(error)
    return loaded, failed


def _read_chain(file: Path, seen: tuple[Path, ...]) -> dict:
    """The file's tables merged over those of the profile it extends."""
    resolved = file.resolve()
    if resolved in seen:
        chain = " → ".join(p.stem for p in seen + (resolved,))
        raise ProfileError(f"'extends' forms a cycle ({chain})", file=file, key="extends",
                           hint="remove 'extends' from one of these profiles")
    text = _read_text(file)
    raw = _parse(text, file)
    check_keys(raw, file, lambda key_path: find_key_line(text, key_path))
    parent_name = raw.pop("extends", None)
    if parent_name is None:
        return raw
    try:
        if looks_like_path(parent_name) and not Path(parent_name).is_absolute():
            parent_file = find_profile(file.parent / parent_name)
        else:
            parent_file = find_profile(parent_name)
            if parent_file.resolve() == resolved:
                # a user profile extending the shipped one it overrides
                parent_file = find_profile(paths.shipped_profiles_dir() / f"{parent_name}.toml")
    except ProfileError as error:
        raise ProfileError(f"'extends' names {error.message}", file=file, key="extends", hint=error.hint,
                           line=find_key_line(text, ("extends",))) from None
    return _merge(_read_chain(parent_file, seen + (resolved,)), raw)


def _merge(base: dict, override: dict) -> dict:
    merged = {**base, **override}
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _merge(base[key], value)
    return merged


def _read_text(file: Path) -> str:
    try:
        _refuse_a_model_file(file)
        return untrusted.read_text(file)
    except FileNotFoundError:
        raise ProfileError("profile file not found", file=file, hint="check the path") from None
    except PermissionError:
        raise ProfileError("cannot read the profile: permission denied", file=file,
                           hint="check the file's permissions (it must be readable by you)") from None
    except untrusted.Unreadable as error:
        raise ProfileError(f"the profile is not UTF-8 text ({error.reason})", file=file,
                           hint="save it as UTF-8 text") from None
    except OSError as error:
        raise ProfileError(f"cannot read the profile ({error.strerror or error})", file=file,
                           hint="check that the path names a readable .toml file") from None


def _refuse_a_model_file(file: Path) -> None:
    """A GGUF given where a profile goes (``--profile model.gguf``) is named as one, with
    the profile that runs it, before the whole model is read as text."""
    if file.is_file():
        with file.open("rb") as handle:
            magic = handle.read(4)
        if magic == b"GGUF":
            source = str(file.resolve()).replace("\\", "\\\\").replace('"', '\\"')
            raise ProfileError("this is a GGUF model file, not a profile", file=file,
                               hint=f'write a profile, e.g. my-model.toml: [target] source = "{source}" and '
                                    f'backend = "llama.cpp", [speculation] method = "ngram"; then --profile '
                                    f'my-model.toml')


def _parse(text: str, file: Path) -> dict:
    try:
        return untrusted.toml(text)
    except untrusted.TooDeep:
        raise ProfileError("TOML nested too deeply to read", file=file,
                           hint="nest arrays and inline tables less deeply (no specchat key needs more than a few)"
                           ) from None
    except untrusted.Unreadable as error:
        where = f"near column {error.column}: " if error.column else ""
        raise ProfileError(f"TOML syntax error: {error.reason}", file=file, line=error.line,
                           hint=f"{where}check quotes, brackets and the '=' on that line") from None


_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")


def find_key_line(text: str, key_path: tuple[str, ...]) -> int | None:
    """1-based line defining ``key_path`` (tomllib gives no positions for keys)."""
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = tuple(part.strip().strip('"\'') for part in header.group(1).split("."))
            if table == key_path:
                return number
            continue
        key_match = re.match(r"^\s*([A-Za-z0-9_.\-\"']+)\s*=", line)
        if key_match:
            parts = tuple(p.strip().strip('"\'') for p in key_match.group(1).split("."))
            if table + parts == key_path or (table + parts)[: len(key_path)] == key_path:
                return number
    return None
