"""The harmony texts and the tool the harmony tests share: a weather tool, a model's call to it
and its answer once the tool replied, as gpt-oss writes them."""

from __future__ import annotations

from typing import Any

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CALL = (
    "<|channel|>analysis<|message|>The user wants the weather; call the tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Zürich"}<|call|>'
)
ANSWER = (
    "<|channel|>analysis<|message|>21 degrees, sunny.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is 21 °C and sunny in Zürich. ☀️<|return|>"
)
