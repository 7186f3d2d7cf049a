#!/usr/bin/env python3
"""Build turnout's demo model directory (core/demo_model/): a small byte-level BPE tokenizer and
the config files a router needs (chat template, EOS ids, model id ``turnout-demo``).

Deterministic and offline: the training text is generated here from fixed word lists with a fixed
seed, so running the script again reproduces the committed files.

    python scripts/train_demo_tokenizer.py [--out DIR] [--vocab-size N]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

MODEL_ID = "turnout-demo"
DEFAULT_VOCAB_SIZE = 3000
SEED = 20260

# Chat markup is special (skipped when decoding with skip_special_tokens); tool-call and think tags
# are ordinary added tokens, so they survive decoding and parsers can see them (as Qwen does).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<think>", "</think>"]

_WORD_TEXT = """
the of and to in is you that it he was for on are as with his they at be this have from or one
had by word but not what all were we when your can said there use an each which she do how their
if will up other about out many then them these so some her would make like him into time has
look two more write go see number no way could people my than first water been call who oil its
now find long down day did get come made may part hello world please thanks thank help answer
question weather today tomorrow city paris london tokyo berlin new york temperature sunny rainy
cloudy cold warm hot degrees celsius fahrenheit forecast search query result results list item
items name value values function functions tool tools call calls arguments argument parameter
parameters type object string integer number boolean array required description properties enum
location unit date time model models router request response server client token tokens stream
streaming chat completion completions message messages system user assistant content role reason
reasoning think thinking step steps first second third finally therefore because however also
example simple small large short long fast slow good bad yes no true false null none error errors
retry worker workers health check policy random round robin cache prefix load balance latency
compute add subtract multiply divide sum total count average math code python json yaml file files
read write open close print return def class import from self data text line lines input output
after again air also america animal another any around ask away back base before began begin
below best better between big black blue body book both boy bring build built car care carry
cause change children close color country course cover cross cut dark different does dog door
draw during early earth eat end enough even ever every eye face fact family far father feel few
field fire fish follow food foot form found four free friend full game gave girl give great green
ground group grow half hand happen hard head hear heard high hold home horse house idea important
inside keep kind king knew know land last learn left less letter life light little live low man
mark mean men might mile mind miss money month morning most mother mountain move much music must
near need never next night north notice often old once only open order own page paper pass person
picture piece place plant play point power problem product pull put quick rain ran reach real red
remember rest right river road rock room round run same saw say school science sea seem sentence
set show side since sing size sleep something song soon sound south space special stand star start
state still stood stop story street strong study such sun sure table take talk tell ten test
thing thought three through together told too took top toward town tree try turn under until
upon usually very voice walk want warm watch week well went while white whole why wind without
wood work year young
"""
WORDS = _WORD_TEXT.split()

SENTENCE_TEMPLATES = [
    "The {a} of the {b} is {c}.",
    "What is the {a} in {b} {c}?",
    "Please {a} the {b} and {c} it.",
    "I think the {a} should {b} the {c}.",
    "Let me {a} about this step by step: first the {b}, then the {c}.",
    "Hello! How can I help you with the {a} today?",
    "Sure, here is a short {a} about {b} and {c}.",
    "The answer is {n}, because {a} plus {b} gives {c}.",
]

CODE_SNIPPETS = [
    "def {a}({b}):\n    return {b} + {n}\n",
    "for {a} in range({n}):\n    print({a})\n",
    'import json\n\ndata = json.loads(text)\nprint(data["{a}"])\n',
    "class {A}:\n    def __init__(self, {a}):\n        self.{a} = {a}\n",
]


def _tool_call_json(rng: random.Random) -> str:
    name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
    args = {rng.choice(WORDS): rng.choice([rng.choice(WORDS), rng.randint(0, 999), True])}
    return json.dumps({"name": name, "arguments": args})


def training_text(rng: random.Random, lines: int = 24000) -> list[str]:
    """Deterministic mix of prose, chat transcripts, JSON and code."""
    out: list[str] = []
    for i in range(lines):
        a, b, c = (rng.choice(WORDS) for _ in range(3))
        n = rng.randint(0, 10000)
        kind = i % 7
        if kind == 6:
            out.append(" ".join(w.capitalize() if rng.random() < 0.3 else w for w in (a, b, c)))
            out.append(f"{rng.randint(0, 999)}.{rng.randint(0, 99)} {n} {a}_{b} {b.upper()}")
        elif kind in (0, 1):
            text = rng.choice(SENTENCE_TEMPLATES).format(a=a, b=b, c=c, n=n)
            out.append(text[0].upper() + text[1:])
        elif kind == 2:
            out.append(
                f"<|im_start|>user\n{a.capitalize()} {b} {c}?<|im_end|>\n"
                f"<|im_start|>assistant\n<think>\nThe user asks about {a}.\n</think>\n\n"
                f"{b.capitalize()} {c}.<|im_end|>\n"
            )
        elif kind == 3:
            out.append(f"<tool_call>\n{_tool_call_json(rng)}\n</tool_call>")
        elif kind == 4:
            out.append(
                json.dumps(
                    {"type": "object", "properties": {a: {"type": "string"}}, "required": [a]}
                )
            )
        else:
            out.append(rng.choice(CODE_SNIPPETS).format(a=a, b=b, A=a.capitalize(), n=n))
    return out


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """Train the byte-level BPE and append the special and markup tokens after its vocabulary."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS) - len(MARKUP_TOKENS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Markup must not be learnt as merges of its own: strip it from the training text.
    text = training_text(random.Random(SEED))
    for token in SPECIAL_TOKENS + MARKUP_TOKENS:
        text = [line.replace(token, " ") for line in text]
    tokenizer.train_from_iterator(text, trainer=trainer)
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    return tokenizer


# A Qwen-style ChatML template written for turnout: system/user/assistant/tool turns, `tools`
# advertised in the system turn, tool calls as <tool_call>{json}</tool_call>, reasoning as
# <think>…</think>, and `enable_thinking=false` closing an empty think block in the prompt.
CHAT_TEMPLATE = r"""
{%- set ns = namespace(system='') -%}
{%- if messages and messages[0].role == 'system' -%}
  {%- set ns.system = messages[0].content if messages[0].content is string else '' -%}
  {%- set loop_messages = messages[1:] -%}
{%- else -%}
  {%- set loop_messages = messages -%}
{%- endif -%}
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if ns.system -%}{{- ns.system + '\n\n' -}}{%- endif -%}
  {{- '# Tools\n\nYou can call the functions listed between <tools> and </tools>:\n<tools>' -}}
  {%- for tool in tools -%}
    {{- '\n' + ((tool.function if tool.function is defined else tool) | tojson) -}}
  {%- endfor -%}
  {{- '\n</tools>\n\nTo call one, answer with a JSON object naming the function and its' -}}
  {{- ' arguments inside <tool_call></tool_call> tags:\n<tool_call>\n' -}}
  {{- '{"name": "<function name>", "arguments": {"<parameter>": "<value>"}}\n</tool_call>' -}}
  {{- '<|im_end|>\n' -}}
{%- elif ns.system -%}
  {{- '<|im_start|>system\n' + ns.system + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in loop_messages -%}
  {%- set content = message.content if message.content is string else '' -%}
  {%- if message.role == 'tool' -%}
    {%- if loop.first or loop_messages[loop.index0 - 1].role != 'tool' -%}
      {{- '<|im_start|>user' -}}
    {%- endif -%}
    {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
    {%- if loop.last or loop_messages[loop.index0 + 1].role != 'tool' -%}
      {{- '<|im_end|>\n' -}}
    {%- endif -%}
  {%- elif message.role == 'assistant' -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if message.reasoning_content is defined and message.reasoning_content -%}
      {{- '<think>\n' + (message.reasoning_content | trim) + '\n</think>\n\n' -}}
    {%- endif -%}
    {{- content -}}
    {%- if message.tool_calls is defined and message.tool_calls -%}
      {%- for call in message.tool_calls -%}
        {%- set fn = call.function if call.function is defined else call -%}
        {%- if content or not loop.first -%}{{- '\n' -}}{%- endif -%}
        {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
        {%- if fn.arguments is string -%}{{- fn.arguments -}}
        {%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
        {{- '}\n</tool_call>' -}}
      {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\n' -}}
  {%- else -%}
    {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
  {%- if enable_thinking is defined and enable_thinking is false -%}
    {{- '<think>\n\n</think>\n\n' -}}
  {%- endif -%}
{%- endif -%}
""".strip()


def write_model_dir(out: Path, vocab_size: int) -> None:
    """Write tokenizer.json, tokenizer_config.json, config.json and generation_config.json."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(vocab_size)
    tokenizer.save(str(out / "tokenizer.json"), pretty=False)
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS + MARKUP_TOKENS}
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    added = {
        str(ids[t]): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t in SPECIAL_TOKENS,
        }
        for t in SPECIAL_TOKENS + MARKUP_TOKENS
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 8192,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
    config = {
        "_name_or_path": MODEL_ID,
        "architectures": ["TurnoutDemoForCausalLM"],
        "model_type": "turnout_demo",
        "vocab_size": tokenizer.get_vocab_size(),
        "max_position_embeddings": 8192,
        "bos_token_id": None,
        "eos_token_id": eos,
        "pad_token_id": ids["<|endoftext|>"],
        "turnout_note": "tokenizer-only demo model for turnout's simulated worker (no weights)",
    }
    generation_config = {
        "eos_token_id": eos,
        "pad_token_id": ids["<|endoftext|>"],
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
    }
    for name, data in (
        ("tokenizer_config.json", tokenizer_config),
        ("config.json", config),
        ("generation_config.json", generation_config),
    ):
        (out / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_out = Path(__file__).resolve().parents[1] / "core" / "demo_model"
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    args = parser.parse_args(argv)
    write_model_dir(args.out, args.vocab_size)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
