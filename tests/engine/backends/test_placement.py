"""Where models compute, read from what backends declare (never parsed from a display
string), and the share of the cores torch gets from it."""

from __future__ import annotations

import pytest
import torch

from specchat.engine.backends.base import Backend
from specchat.engine.backends.llamacpp import offload_devices
from specchat.engine.backends.placement import share_cores


class Declared(Backend):
    def __init__(self, where: set[str], torch_threads: bool) -> None:
        self.computes_on, self.uses_torch_threads = frozenset(where), torch_threads


LLAMA_CPU = Declared({"cpu"}, torch_threads=False)
LLAMA_PARTIAL = Declared({"cpu", "gpu"}, torch_threads=False)
LLAMA_GPU = Declared({"gpu"}, torch_threads=False)
TORCH_CPU = Declared({"cpu"}, torch_threads=True)  # a transformers model on the CPU


@pytest.mark.parametrize("n_gpu_layers, devices", [
    (0, {"cpu"}),
    (10, {"cpu", "gpu"}),  # partial offload: the CPU computes too (the old display-string check missed it)
    (30, {"cpu", "gpu"}),  # every block, but the output layer stays on the host
    (31, {"gpu"}),
    (-1, {"gpu"}),
])
def test_llama_cpp_declares_where_it_computes(n_gpu_layers, devices):
    assert offload_devices(n_gpu_layers, num_layers=30) == devices


def test_the_loader_hands_out_backends_that_say_where_they_compute(tiny_profile_path):
    from specchat.config import load_profile
    from specchat.loading import load_models

    loaded = load_models(load_profile(str(tiny_profile_path)))
    assert isinstance(loaded.target, Backend) and isinstance(loaded.draft, Backend)
    assert loaded.target.computes_on == loaded.draft.computes_on == loaded.computes_on == {"cpu"}
    assert loaded.target.uses_torch_threads


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


@pytest.mark.parametrize("models, single", [
    ((LLAMA_CPU, None), True),  # llama.cpp owns the cores; torch only samples
    ((LLAMA_PARTIAL, LLAMA_CPU), True),
    ((LLAMA_CPU, TORCH_CPU), False),  # a CPU transformers draft keeps torch's threads (issue 27)
    ((TORCH_CPU, None), False),
    ((LLAMA_GPU, None), False),  # nothing computes on the CPU: torch's default stays
])
def test_torch_is_single_threaded_only_when_llama_cpp_alone_computes_on_the_cpu(restore_threads, models, single):
    share_cores([TORCH_CPU])  # torch's default, whatever an earlier test left
    default = torch.get_num_threads()
    assert share_cores(models) == torch.get_num_threads() == (1 if single else default)


def test_a_later_profile_gets_torch_threads_back(restore_threads):
    share_cores([TORCH_CPU])
    default = torch.get_num_threads()
    share_cores([LLAMA_CPU])
    assert torch.get_num_threads() == 1
    share_cores([LLAMA_CPU, TORCH_CPU])
    assert torch.get_num_threads() == default


def test_constructing_a_llama_cpp_backend_leaves_torch_threads_alone():
    """The process-wide setting is the loader's decision (share_cores), not the backend's."""
    import inspect

    from specchat.engine.backends import llamacpp

    assert "set_num_threads" not in inspect.getsource(llamacpp)
