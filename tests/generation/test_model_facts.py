"""What the router reads of a model's ``config.json`` beyond its tokenizer."""

from __future__ import annotations

from turnout.generation.model_facts import facts_from_config


def test_the_vocabulary_is_the_models_own() -> None:
    # a padded output layer is larger than the tokenizer; multimodal configs nest it
    assert facts_from_config({"vocab_size": 152064}).vocab_size == 152064
    assert facts_from_config({"text_config": {"vocab_size": 151936}}).vocab_size == 151936
    assert facts_from_config({}).vocab_size is None
    assert facts_from_config({"vocab_size": "many"}).vocab_size is None
