"""Test tiers: markers applied from what a test uses, so they cannot drift.

A test's tiers are read at collection from the code it runs: its own function, every
fixture in its closure, and the module-level functions of tests/ that these call (one
name at a time, transitively). A name that resolves to an object of a module below
(``subprocess.run``, ``LlamaCppBackend``, ``specchat.training.…``) gives its tier;
so does a fixture named in FIXTURES. A helper that starts a subprocess or loads a model
therefore tags every test that calls it, wherever the test lives.

``pytest --fast`` (``make test-fast``) deselects every test of a tier in SLOW; a test left
that starts a subprocess or loads a model file anyway fails, naming the tier its helper
should carry (the guard below): the fast tier stays what it says.
"""

from __future__ import annotations

import dis
import inspect
import os
import sys
import types

import pytest

TIERS = {
    "model": "loads a model file (transformers or llama.cpp; tiny random ones too)",
    "llamacpp": "runs the llama.cpp backend (llama-cpp-python)",
    "subprocess": "starts a Python or CLI subprocess",
    "server": "starts a server (llama-server, specchat serve)",
    "training": "runs a training or distillation pipeline",
    "power": "draws thousands of samples: a chi-square against an exact law, or a planted bug's trial",
}
SLOW = ("model", "llamacpp", "subprocess", "server", "training", "power")  # what make test-fast leaves out

# module prefix of an object a test's code names → its tiers
MODULES = {
    "subprocess": ("subprocess",),
    "pty": ("subprocess",),
    "llama_cpp": ("llamacpp", "model"),
    "specchat.engine.backends.llamacpp": ("llamacpp", "model"),
    "specchat.engine.backends.llamacpp_batch": ("llamacpp", "model"),
    "specchat.engine.backends.llamacpp_tree": ("llamacpp", "model"),
    "specchat.loading": ("model",),
    "specchat.live": ("model",),
    "specchat.cli": ("model",),  # main() in-process: most commands load the profile's models
    "specchat.commands": ("model",),
    "specchat.serve": ("server", "model"),
    "specchat.training": ("training", "model"),
    "specchat.bench.runner": ("model",),
    "specchat.models.pull": ("subprocess",),  # pip downloads
    "transformers": ("model",),
    "tests.support.llama_server_helpers": ("server", "subprocess"),
    "tests.support.needs": ("llamacpp", "model"),  # embedded_llama_backend
    "tests.support.power": ("power",),
    "tests.support.batched": ("power",),  # seeded samples by the thousand
    "tests.support.vocab16": ("model",),  # tiny transformers Llamas, built in memory
    "tests.support.tiny_models": ("model",),
    "tests.support.tiny_heads": ("model",),
}
# fixtures whose value is a loaded model or a running server, by name (conftest's)
FIXTURES = {
    "embedded_model_dir": ("model",),
    "tiny_model_dir": ("model",),
    "tiny_draft_dir": ("model",),
    "tiny_tokenizer_dir": ("model",),
}


def _tiers_of_object(obj) -> set[str]:
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    return _tiers_of_module(module) if isinstance(module, str) else set()


def _tiers_of_module(module: str) -> set[str]:
    found = set()
    for prefix, tiers in MODULES.items():
        if module == prefix or module.startswith(prefix + "."):
            found.update(tiers)
    return found


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


_DIRECT: dict[types.CodeType, tuple[set[str], list]] = {}


def _direct(function) -> tuple[set[str], list]:
    """What ``function``'s own code names (its tiers) and the tests/ functions it names
    or imports by name (to follow); read once per function."""
    code = function.__code__
    if code in _DIRECT:
        return _DIRECT[code]
    found, helpers = _tiers_of_object(function), []
    namespace = getattr(function, "__globals__", {})

    def follow(obj):
        found.update(_tiers_of_object(obj))
        if callable(obj) and _in_tests(obj):
            helpers.append(obj)
            if isinstance(obj, type):  # a helper class: its methods
                helpers.extend(m for m in vars(obj).values() if inspect.isfunction(m))

    for each in _codes(code):
        for instruction in dis.get_instructions(each):  # imports inside the function
            if instruction.opname == "IMPORT_NAME":
                found.update(_tiers_of_module(instruction.argval))
                module = sys.modules.get(instruction.argval)
                if module is not None and _in_tests(module):
                    for name in each.co_names:  # from helper import name
                        if (obj := getattr(module, name, None)) is not None:
                            follow(obj)
        for name in each.co_names:
            if (obj := namespace.get(name)) is not None:
                follow(obj)
    _DIRECT[code] = (found, helpers)
    return _DIRECT[code]


def _tiers_of_function(function, seen: set) -> set[str]:
    """What ``function`` names, and the tests/ functions it calls, transitively."""
    found, stack = set(), [function]
    while stack:
        function = inspect.unwrap(stack.pop())
        code = getattr(function, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        tiers, helpers = _direct(function)
        found |= tiers
        stack.extend(helpers)
    return found


def _in_tests(obj) -> bool:
    path = getattr(getattr(obj, "__code__", None), "co_filename", None) or getattr(inspect.getmodule(obj), "__file__", "")
    return bool(path) and os.sep + "tests" + os.sep in path and "site-packages" not in path


def tiers_of(item: pytest.Item) -> set[str]:
    found: set[str] = set()
    seen: set = set()
    if isinstance(item, pytest.Function):
        found |= _tiers_of_function(item.function, seen)
        for name, defs in item._fixtureinfo.name2fixturedefs.items():
            found.update(FIXTURES.get(name, ()))
            for fixturedef in defs:
                if fixturedef.func is not _fast_tier_guard.__wrapped__:  # the guard names what it refuses
                    found |= _tiers_of_function(fixturedef.func, seen)
        for mark in item.iter_markers("skipif"):
            if "llama" in str(mark.kwargs.get("reason", "")):
                found.update(("llamacpp", "model"))
    return found


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help=f"the inner loop: leave out every test of the tiers {', '.join(SLOW)}")


def register(config: pytest.Config) -> None:
    for name, what in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {what} (applied by tests/support/tiers.py)")
    # marked by hand (tests/gpu/): without a CUDA GPU they skip, saying why
    config.addinivalue_line("markers", "gpu: runs on a CUDA GPU (make test-gpu, scripts/gpu-check.sh)")


def apply(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test with its tiers; under --fast, deselects those of a SLOW tier."""
    slow = []
    for item in items:
        tiers = tiers_of(item)
        for tier in sorted(tiers):
            if tier not in {m.name for m in item.iter_markers()}:
                item.add_marker(tier)
        if config.getoption("--fast") and tiers & set(SLOW):
            slow.append(item)
    if slow:
        config.hook.pytest_deselected(items=slow)
        gone = set(slow)
        items[:] = [item for item in items if item not in gone]


# --- the fast tier's guard ----------------------------------------------------------------


def _refuse(tier: str, what: str):
    def refused(*args, **kwargs):
        raise AssertionError(f"the fast tier ran a test that {what}: give the helper or fixture that does it "
                             f"the {tier!r} tier in tests/support/tiers.py (MODULES or FIXTURES)")
    return refused


@pytest.fixture(autouse=True)
def _fast_tier_guard(request, monkeypatch):
    if not request.config.getoption("--fast"):
        yield
        return
    import platform
    import subprocess

    # the standard library asks `uname -p` once and caches it (platform.platform(), as a
    # recording's header reads it): asked here, before the guard, it is no test's subprocess
    platform.platform(), platform.platform(terse=True), platform.processor()
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("subprocess", "starts a subprocess"))
    try:
        import transformers

        monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained",
                            classmethod(_refuse("model", "loads a transformers model")))
    except ImportError:
        pass
    from specchat.engine.backends.llamacpp import LlamaCppBackend  # imports llama_cpp only when it loads

    monkeypatch.setattr(LlamaCppBackend, "__init__", _refuse("llamacpp", "loads a llama.cpp model"))
    yield
