"""A prompt file with two prompts of one id is refused in one line naming the file and
the id (issue 59, item 5): bench pairs each run with its plain twin by (set, id, repeat),
so the paired speed-up and the "same outputs" count came out wrong, silently. Planted
bug: no check (``_unique`` returning the prompts as they are)."""

import pytest

from specchat.bench.prompt_sets import load_prompt_sets
from specchat.errors import SpecchatError

FILES = {
    "twice.toml": '[[prompts]]\nid = "a"\ntext = "one"\n[[prompts]]\nid = "b"\ntext = "two"\n'
                  '[[prompts]]\nid = "a"\ntext = "three"\n',
    "twice.jsonl": '{"id": "q", "prompt": "one"}\n{"id": "q", "prompt": "two"}\n',
    "mixed.jsonl": '{"prompt": "one"}\n{"id": "mixed-1", "prompt": "two"}\n',  # an id a line's default already has
}


@pytest.mark.parametrize("name", FILES)
def test_two_prompts_of_one_id_are_one_line_naming_file_and_id(tmp_path, name):
    path = tmp_path / name
    path.write_text(FILES[name])
    with pytest.raises(SpecchatError, match="is given twice") as caught:
        load_prompt_sets([str(path)])
    line = str(caught.value)
    assert str(path) in line and {"twice.toml": "'a'", "twice.jsonl": "'q'", "mixed.jsonl": "'mixed-1'"}[name] in line
    assert "\n" not in line


def test_distinct_ids_load():
    (prompt_set,) = load_prompt_sets(["repetitive"])
    assert len({p.id for p in prompt_set.prompts}) == len(prompt_set.prompts)
