"""specchat/methods.py: the one table of methods, its invariants, and that config, the
factory, bench, serve and the UI read it rather than lists of their own."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from specchat.methods import METHODS, SPELLINGS, named

TABLE = tuple(METHODS.values())
HEAD_KINDS = tuple(dict.fromkeys(m.needs for m in TABLE if m.head))


def test_each_spelling_means_one_method_and_names_are_canonical():
    spellings = [s for m in TABLE for s in (m.name, *m.aliases)]
    assert len(spellings) == len(set(spellings)) == len(SPELLINGS)
    assert all(SPELLINGS[m.name] is m for m in TABLE)
    assert SPELLINGS["draft"] is METHODS["draft_model"]  # what users typed for bench before the table


@pytest.mark.parametrize("method", TABLE, ids=lambda m: m.name)
def test_a_row_is_consistent(method):
    assert method.needs in ("", "draft", *HEAD_KINDS)
    assert 0 < len(method.label) <= 7  # the panel's per-proposer column
    assert method.title and method.title[0] != " "
    # llama.cpp's batched engine runs every proposer's chains but Medusa heads', which read
    # final hidden states a batched decode does not hand out
    assert method.batched == (method.needs != "medusa")
    assert not method.tree or method.needs in HEAD_KINDS  # trees come from a head's ranked candidates


def test_every_head_kind_is_titled_by_a_method_of_its_own():
    # bench's "the profile has no …" line titles a need by its first row
    assert [next(m for m in TABLE if m.needs == kind).name for kind in HEAD_KINDS] == list(HEAD_KINDS)


def test_each_proposer_declares_what_its_row_says():
    from specchat.engine.proposers.eagle import EagleProposer
    from specchat.engine.proposers.hybrid import HybridProposer, NgramDraftProposer
    from specchat.engine.proposers.medusa import MedusaProposer
    from specchat.engine.proposers import DraftModelProposer, NgramProposer, Proposer

    built = tuple(named(m.builds) for m in TABLE if m.builds)  # the row names the class the factory builds
    proposers = (DraftModelProposer, HybridProposer, NgramDraftProposer, Proposer) + built
    assert {NgramProposer, EagleProposer, MedusaProposer} <= set(built)
    assert all(m.point_mass and not m.needs for m in TABLE if m.builds and not m.head)
    assert all(named(m.head).kind == m.needs for m in TABLE if m.head)  # the head a row names is its kind
    assert {p.kind: p.point_mass for p in proposers} == {m.name: m.point_mass for m in TABLE}


def test_a_profile_accepts_every_row_and_misspelt_method_is_one_line_with_a_suggestion(tmp_path):
    from specchat.config import load_profile
    from specchat.config.schema import SPECULATION_KEYS
    from specchat.errors import ProfileError

    assert SPECULATION_KEYS["method"].choices == tuple(METHODS)
    path = tmp_path / "typo.toml"
    path.write_text('extends = "default"\n[speculation]\nmethod = "eagle"\n')
    with pytest.raises(ProfileError) as error:
        load_profile(str(path))
    assert "\n" not in str(error.value) and "did you mean 'eagle3'?" in str(error.value)


def test_config_no_longer_imports_remote():
    code = "import sys, specchat.config.recorded, specchat.config.loader; print('specchat.remote' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120).stdout.strip() == "False"


def test_bench_resolves_every_spelling_to_its_row():
    from specchat.bench.configs import parse_methods
    from specchat.errors import SpecchatError

    assert parse_methods("draft,ngram,draft_model,none") == ["draft_model", "ngram", "none"]
    assert parse_methods(",".join(SPELLINGS)) == list(METHODS)
    with pytest.raises(SpecchatError) as error:
        parse_methods("lookahead")
    assert all(name in error.value.hint for name in SPELLINGS)


@pytest.mark.parametrize("method", TABLE, ids=lambda m: m.name)
def test_serve_takes_exactly_the_batched_rows(method):
    from specchat.config import load_profile
    from specchat.errors import SpecchatError
    from specchat.serve.service import check_profile

    profile = load_profile("default")
    assert profile.target.backend == "llama.cpp"
    profile = profile.replace(speculation={"method": method.name})
    if method.batched:
        check_profile(profile, 2)
    else:
        with pytest.raises(SpecchatError, match=f"cannot run speculation.method = '{method.name}'"):
            check_profile(profile, 2)


@pytest.mark.parametrize("method", TABLE, ids=lambda m: m.name)
def test_the_ui_shows_each_rows_labels(method):
    from specchat.events import Token
    from specchat.ui.figures import source_lines
    from specchat.ui.screens.inspector import token_details

    other = "ngram" if method.name != "ngram" else "eagle3"
    counts = {"drafted": 4, "accepted": 2, "draft_ms_per_token": None}
    lines = source_lines({method.name: counts, other: counts})
    assert any(line.startswith(f"{method.label} ") for line in lines[1:])
    token = Token(id=1, text="a", kind="accepted", p=0.5, q=0.5, source=method.name)
    assert f"drafted by {method.title}" in token_details(token, 0, 1)


NEW_PROPOSER = '''
from specchat.engine.proposers import NgramProposer


class StrictLookup(NgramProposer):
    """Prompt lookup at the longest n only: a model-free proposer written for this test."""

    kind = "strict"

    def _find(self, ids, k):
        return self._index.lookup(ids, k, self.prompt_lookup_max, self.prompt_lookup_max)
'''
WITH_A_NEW_ROW = '''
import sys
from specchat import methods

row = methods.Method("strict", "strict", "strict lookup", point_mass=True, batched=True,
                     builds="strict_lookup:StrictLookup")
methods.METHODS[row.name] = methods.SPELLINGS[row.name] = row  # the one row, before anything reads the table
from specchat.bench.configs import parse_methods
from specchat.cli import main
from specchat.ui.figures import source_lines

assert parse_methods("strict,none") == ["strict", "none"]
assert source_lines({"strict": {"accepted": 3, "drafted": 4}, "ngram": {}})[2].startswith("strict")  # the panel
sys.exit(main(["run", "--profile", sys.argv[1], "--prompt", "Repeat after me: one two three, one two three.",
               "--max-new-tokens", "32", "--temperature", "0", "--no-record", "--json"]))
'''


def test_a_new_model_free_proposer_is_its_module_and_one_row(tmp_path):
    """Issue 42's promise, shown: a model-free proposer is a module plus one row of the table,
    and then the profile accepts it, the factory builds it, bench parses it, the chat sends
    its drafts through the one verifier (whose exactness the χ² suites hold for every point-mass
    proposer) and the panel names it. Greedy text is not compared with plain decoding's: on a
    BF16 CPU a verify batch's logits differ from one token's by up to the format's batch noise,
    which can flip a near tie (verify/near_tie.py)."""
    (tmp_path / "strict_lookup.py").write_text(NEW_PROPOSER)
    profile = tmp_path / "strict.toml"
    profile.write_text('extends = "default"\n[speculation]\nmethod = "strict"\nnum_speculative_tokens = 4\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SPECCHAT_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-c", WITH_A_NEW_ROW, str(profile)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    drafted = lines[-1]["drafts_by_source"]
    assert list(drafted) == ["strict"] and drafted["strict"]["accepted"] > 0  # its drafts, verified and kept
    assert any(t.get("kind") == "accepted" for t in lines[:-1])


TOY_HEAD = '''
import torch
from torch import nn

from specchat.heads.checkpoint import Head, HeadError, read_config, read_tensors, weights_file


class ToyHead(Head):
    """One linear map from the target's final hidden state to logits: a head kind written for this test."""

    kind, reads, title = "toy", "final_hidden", "a toy head"
    architecture, config_key = "toyhead", "toy_rows"
    unrecognised = ("not a toy head (config.json has no toy_rows)", "give a toy head")

    def __init__(self, hidden, vocab):
        super().__init__()
        self.map = nn.Linear(hidden, vocab, bias=False)

    @classmethod
    def load(cls, directory, target):
        config = read_config(directory, cls)
        if config["toy_rows"] != target.vocab_size:
            raise HeadError("the head was built for another target", file=str(directory), hint="use another")
        head = cls(target.hidden_size, target.vocab_size)
        head.load_state_dict(read_tensors(weights_file(directory)))
        return head.eval()
'''
TOY_PROPOSER = '''
import torch

from specchat.engine.proposers.base import HeadProposer, Proposal
from specchat.engine.sampling import sample, warp


class ToyProposer(HeadProposer):
    """One draft a step from the toy head on the final hidden state of the last position the target kept."""

    kind = "toy"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)  # the head, beside the target, and the tree it may draft, checked
        self.target.request_final_hidden()
        self.reset()

    def reset(self):
        self._hidden, self._position, self._drafted = None, -1, 0

    def observe(self, num_accepted):
        rows = self.target.last_final_hidden
        if rows is not None and (kept := rows.shape[0] - (self._drafted - num_accepted)) > 0:
            self._hidden, self._position = rows[kept - 1], self.target.final_hidden_start + kept - 1
        self.target.last_final_hidden, self._drafted = None, 0

    @torch.inference_mode()
    def propose(self, ids, k, params, generator):
        if k <= 0 or self._hidden is None or self._position != len(ids) - 2:
            self._drafted = 0
            return Proposal(torch.empty(0, dtype=torch.long, device=self.device), None, source=self.kind)
        q = warp(self.head.map(self._hidden.float())[None], params)  # [1, V]
        self._drafted = 1
        return Proposal(sample(q, generator), q, forwards=1, source=self.kind)
'''
WITH_A_HEAD_ROW = '''
import sys
from specchat import methods

row = methods.Method("toy", "toy", "toy head", needs="toy", head=sys.argv[2], builds="toy_proposer:ToyProposer")
methods.METHODS[row.name] = methods.SPELLINGS[row.name] = row  # the one row, before anything reads the table
from specchat.cli import main

sys.exit(main(["run", "--profile", sys.argv[1], "--prompt", "one two one two one two", "--max-new-tokens", "24",
               "--no-record", "--json"]))
'''


def test_a_new_head_based_proposer_is_its_head_module_its_proposer_module_and_one_row(tmp_path, tiny_model_dir,
                                                                                        monkeypatch):
    """Issue 58's promise, shown: a head kind is its head module (the nn.Module, its
    safetensors reading and how its config is recognised, declared on the class), its proposer
    module and one row naming both; then the profile takes it, the loader reads the head from
    its folder, the factory builds the proposer and the chat verifies its drafts. A row naming
    a head class that is not there fails to load: the pass rests on the row."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from tests.support.tiny_models import write_tiny_profile

    (tmp_path / "toy_head.py").write_text(TOY_HEAD)
    (tmp_path / "toy_proposer.py").write_text(TOY_PROPOSER)
    folder = tmp_path / "head"
    folder.mkdir()
    target = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    save_file({"map.weight": target.lm_head.weight.detach().clone()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architectures": ["ToyHeadModel"],
                                                    "toy_rows": target.config.vocab_size}))
    profile = write_tiny_profile(tmp_path / "toy.toml", tiny_model_dir, method="toy", head=str(folder))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SPECCHAT_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-c", WITH_A_HEAD_ROW, str(profile), "toy_head:ToyHead"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    drafted = lines[-1]["drafts_by_source"]
    assert list(drafted) == ["toy"] and drafted["toy"]["drafted"] > 0
    assert {"accepted", "resampled"} & {t.get("kind") for t in lines[:-1]}  # the verifier's verdicts on them
    from specchat import methods
    from specchat.loading.heads import load_head

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_head", raising=False)
    monkeypatch.setitem(methods.METHODS, "toy", methods.Method("toy", "toy", "toy head", needs="toy",
                                                               head="toy_head:NoSuchHead", builds="toy_proposer:ToyProposer"))
    with pytest.raises(AttributeError, match="NoSuchHead"):  # the loader takes the head class the row names
        load_head(dataclasses.make_dataclass("Spec", ["method"])("toy"), None, None)
