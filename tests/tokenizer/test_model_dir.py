"""Loading model directories: special tokens, EOS ids, templates, BOS handling and clear errors."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from tests.tokenizer.conftest import MakeModelDir
from turnout.errors import StartupError
from turnout.tokenizer import ChatTemplateError, ModelFilesError, ModelTokenizer
from turnout.tokenizer.model_dir import read_model_dir

TEMPLATE = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ eos_token }}"


def test_deepseek_directory(deepseek_dir: Path) -> None:
    tok = ModelTokenizer.from_dir(deepseek_dir)
    assert tok.special_tokens["bos_token"] == "<｜begin▁of▁sentence｜>"
    assert tok.eos_token_ids == {tok.token_to_id("<｜end▁of▁sentence｜>")}
    assert tok.token_to_id("<｜begin▁of▁sentence｜>") in tok.special_token_ids
    assert tok.vocab_size == tok.backend.get_vocab_size(with_added_tokens=True)
    assert tok.id_to_token(tok.token_to_id("Hello") or -1) == "Hello"
    assert tok.id_to_token(10**9) is None
    text = "Hello wörld 😀 你好\n\tcode()"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert tok.encode_batch([text, "x"], add_special_tokens=False) == [ids, tok.encode("x", False)]
    assert tok.decode_batch([ids]) == [text]
    assert tok.chat_templates == {}
    with pytest.raises(ChatTemplateError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("add_bos", [True, False])
def test_encode_matches_transformers(make_model_dir: MakeModelDir, add_bos: bool) -> None:
    """tokenizer.json's post-processor decides special tokens (transformers 5 ignores add_bos)."""
    transformers = pytest.importorskip("transformers")
    config = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "add_bos_token": add_bos}
    directory = make_model_dir(tokenizer_config=config)
    ours = ModelTokenizer.from_dir(directory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoTokenizer.from_pretrained(str(directory))
    for text in ["Hello world", "你好 😀", ""]:
        assert ours.encode(text) == hf.encode(text)
        assert ours.encode(text, add_special_tokens=False) == hf.encode(
            text, add_special_tokens=False
        )
    assert ours.files.add_bos_token is add_bos


def test_post_processor_of_tokenizer_json_adds_bos(
    make_model_dir: MakeModelDir, small_tokenizer_file: Path, tmp_path: Path
) -> None:
    data = json.loads(small_tokenizer_file.read_text())
    bos_id = next(t["id"] for t in data["added_tokens"] if t["content"] == "<|bos|>")
    bos = {"SpecialToken": {"id": "<|bos|>", "type_id": 0}}
    seq_a = {"Sequence": {"id": "A", "type_id": 0}}
    seq_b = {"Sequence": {"id": "B", "type_id": 1}}
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, seq_a],
        "pair": [seq_a, seq_b],
        "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [bos_id], "tokens": ["<|bos|>"]}},
    }
    path = tmp_path / "with_bos.json"
    path.write_text(json.dumps(data))
    tok = ModelTokenizer.from_dir(make_model_dir(tokenizer_json=path))
    assert tok.encode("a")[0] == bos_id
    assert bos_id not in tok.encode("a", add_special_tokens=False)


def test_special_tokens_as_added_token_dicts_and_missing_ones_added(
    make_model_dir: MakeModelDir,
) -> None:
    config = {
        "bos_token": {"__type": "AddedToken", "content": "<|bos|>", "special": True},
        "eos_token": "<|newly_added_eos|>",
        "unk_token": None,
        "additional_special_tokens": ["<|tool|>"],
    }
    tok = ModelTokenizer.from_dir(make_model_dir(tokenizer_config=config))
    assert tok.special_tokens == {"bos_token": "<|bos|>", "eos_token": "<|newly_added_eos|>"}
    new_id = tok.token_to_id("<|newly_added_eos|>")
    assert new_id is not None
    assert new_id in tok.special_token_ids
    assert tok.eos_token_ids == {new_id}  # no config.json: the tokenizer's eos_token
    assert tok.encode("x<|newly_added_eos|>", add_special_tokens=False)[-1] == new_id
    assert tok.decode([new_id], skip_special_tokens=True) == ""


def test_eos_ids_union_of_config_and_generation_config(make_model_dir: MakeModelDir) -> None:
    directory = make_model_dir(
        tokenizer_config={"eos_token": "<|eos|>"},
        config={"eos_token_id": 3},
        generation_config={"eos_token_id": [4, 5]},
    )
    assert ModelTokenizer.from_dir(directory).eos_token_ids == {3, 4, 5}


def test_special_tokens_map_fallback(make_model_dir: MakeModelDir) -> None:
    directory = make_model_dir(special_tokens_map={"eos_token": {"content": "<|eos|>"}})
    assert ModelTokenizer.from_dir(directory).special_tokens == {"eos_token": "<|eos|>"}


def test_template_sources_and_priority(make_model_dir: MakeModelDir, tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi"}]
    from_config = make_model_dir(tokenizer_config={"chat_template": "cfg{{ messages|length }}"})
    assert ModelTokenizer.from_dir(from_config).apply_chat_template(messages) == "cfg1"
    jinja_wins = make_model_dir(
        tokenizer_config={"chat_template": "cfg"},
        chat_template__json={"chat_template": "json"},
        chat_template__jinja="jinja{{ add_generation_prompt }}",
    )
    assert ModelTokenizer.from_dir(jinja_wins).apply_chat_template(messages) == "jinjaTrue"
    json_next = make_model_dir(
        tokenizer_config={"chat_template": "cfg"}, chat_template__json={"chat_template": "json"}
    )
    assert ModelTokenizer.from_dir(json_next).apply_chat_template(messages) == "json"
    # A caller's template (text or file) overrides them all.
    assert (
        ModelTokenizer.from_dir(jinja_wins, chat_template="t{{ 1 }}").apply_chat_template(messages)
        == "t1"
    )
    template_file = tmp_path / "mine.jinja"
    template_file.write_text("file{{ messages[0].content }}")
    assert (
        ModelTokenizer.from_dir(jinja_wins, chat_template=template_file).apply_chat_template(
            messages
        )
        == "filehi"
    )


def test_named_templates(make_model_dir: MakeModelDir) -> None:
    named = [
        {"name": "default", "template": "plain"},
        {"name": "tool_use", "template": "tools:{{ tools|length }}"},
        {"name": "rag", "template": "docs:{{ documents[0].title }}"},
    ]
    tok = ModelTokenizer.from_dir(make_model_dir(tokenizer_config={"chat_template": named}))
    messages = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(messages) == "plain"
    assert tok.apply_chat_template(messages, tools=[{"type": "function"}]) == "tools:1"
    docs = [{"title": "T", "text": "body"}]
    assert tok.apply_chat_template(messages, documents=docs, chat_template="rag") == "docs:T"
    with pytest.raises(ChatTemplateError, match="unknown chat template"):
        tok.apply_chat_template(messages, chat_template="nope")


def test_from_dir_is_cached_per_path_and_template(make_model_dir: MakeModelDir) -> None:
    directory = make_model_dir(tokenizer_config={"chat_template": TEMPLATE})
    first = ModelTokenizer.from_dir(directory)
    assert ModelTokenizer.from_dir(str(directory) + "/") is first
    assert ModelTokenizer.from_dir(directory, chat_template="x{{ 1 }}") is not first


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"tokenizer_json": None}, r"tokenizer\.json: file not found"),
        ({"tokenizer_config": "{not json"}, r"tokenizer_config\.json: invalid JSON"),
        ({"tokenizer_config": "[1, 2]"}, r"tokenizer_config\.json: expected a JSON object"),
        ({"config": {"eos_token_id": "2"}}, r"config\.json: eos_token_id must be an integer"),
        ({"tokenizer_config": {"eos_token": 5}}, r"eos_token: expected a token string"),
        ({"tokenizer_config": {"add_bos_token": "yes"}}, r"add_bos_token must be true or false"),
        ({"chat_template__jinja": "{% for %}"}, r"chat_template\.jinja: .*syntax error on line 1"),
        (
            {"tokenizer_config": {"chat_template": [{"name": "x"}]}},
            r"named chat template needs string 'name' and 'template'",
        ),
        (
            {"tokenizer_config": {"chat_template": [{"name": "x", "template": "t"}]}},
            r"include no 'default' template",
        ),
    ],
)
def test_broken_files_are_clear_startup_errors(
    make_model_dir: MakeModelDir, files: dict[str, object], message: str
) -> None:
    kwargs = dict(files)
    tokenizer_json = kwargs.pop("tokenizer_json", "keep")
    if tokenizer_json is None:
        directory = make_model_dir(tokenizer_json=None, **kwargs)
    else:
        directory = make_model_dir(**kwargs)
    with pytest.raises(ModelFilesError, match=message) as info:
        ModelTokenizer.from_dir(directory)
    assert isinstance(info.value, StartupError)
    assert str(directory) in str(info.value)


def test_corrupt_tokenizer_json(make_model_dir: MakeModelDir, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": {"type": "Nope"}}))
    with pytest.raises(ModelFilesError, match=r"tokenizer\.json: cannot load tokenizer"):
        ModelTokenizer.from_dir(make_model_dir(tokenizer_json=bad))


def test_missing_directory_and_template_file(tmp_path: Path, make_model_dir: MakeModelDir) -> None:
    with pytest.raises(ModelFilesError, match="model directory not found"):
        ModelTokenizer.from_dir(tmp_path / "absent")
    with pytest.raises(ModelFilesError, match="chat template file not found"):
        read_model_dir(make_model_dir(), chat_template=str(tmp_path / "absent.jinja"))
