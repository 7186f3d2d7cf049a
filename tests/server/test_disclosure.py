"""What callers without the admin key are not shown: file paths cut to their last part."""

from __future__ import annotations

from turnout.server.disclosure import without_paths


def test_absolute_paths_are_cut_to_their_last_part_anywhere_in_the_answer() -> None:
    info = {
        "model_path": "/models/qwen3-8b/",
        "served_model_name": "qwen3-8b",
        "server_args": {
            "tokenizer_path": "~/cache/tok",
            "lora_paths": ["/adapters/sql", "file:///adapters/poet", "C:\\\\models\\\\x"],
            "hub_id": "Qwen/Qwen3-8B",
            "dp_size": 2,
        },
    }
    assert without_paths(info) == {
        "model_path": "qwen3-8b",
        "served_model_name": "qwen3-8b",
        "server_args": {
            "tokenizer_path": "tok",
            "lora_paths": ["sql", "poet", "x"],
            "hub_id": "Qwen/Qwen3-8B",  # a hub id, not a path: kept
            "dp_size": 2,
        },
    }
