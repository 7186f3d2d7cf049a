"""Built-in reasoning parsers, registered lazily: a parser module is imported only when chosen.

Model patterns are case-insensitive globs over the model id; the longest matching pattern wins
across all parsers (``*qwen3*thinking*`` beats ``*qwen3*`` for ``Qwen3-…-Thinking-2507``).
"""

from __future__ import annotations

from turnout.hookspecs import ReasoningParserRegister, hookimpl

_PKG = "turnout.plugins.reasoning_parsers"

# (canonical name, "module:Class", aliases, model-name patterns, description)
BUILTIN_REASONING_PARSERS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...], str], ...] = (
    ("deepseek_r1", "deepseek_r1:DeepSeekR1ReasoningParser", ("deepseek-r1",),
     ("*deepseek-r1*", "*qwq*"), "DeepSeek-R1, QwQ: <think>…</think>, starts in reasoning"),
    ("qwen3", "qwen3:Qwen3ReasoningParser", ("qwen",),
     ("*qwen3*",), "Qwen3 hybrid: <think>…</think>, thinking per request; <tool_call> ends it"),
    ("qwen3_thinking", "qwen3_thinking:Qwen3ThinkingReasoningParser", ("qwen3-thinking",),
     ("*qwen3*thinking*",), "Qwen3 thinking-only (-Thinking-2507): starts in reasoning"),
    ("deepseek_v31", "deepseek_v31:DeepSeekV31ReasoningParser",
     ("deepseek-v31", "deepseek_v3", "deepseek-v3", "deepseek_v32", "deepseek_v4", "deepseek-v4"),
     ("*deepseek-v3*", "*deepseek-v3.1*", "*deepseek-v3-1*", "*deepseek-v3.2*", "*deepseek-v4*"),
     "DeepSeek V3.1/V3.2/V4: <think>…</think>, thinking per request"),
    ("glm45", "glm45:Glm45ReasoningParser", ("glm47", "glm"),
     ("*glm-4.5*", "*glm-4.6*", "*glm-4.7*", "*glm-5*", "*glm45*", "*glm47*"),
     "GLM-4.5/4.6/4.7/5: <think>…</think> (or a prompt that opens it); <tool_call> also ends it"),
    ("kimi", "kimi:KimiReasoningParser", (),
     ("*kimi-vl*",), "Kimi-VL / k1.5: ◁think▷…◁/think▷"),
    ("kimi_k2", "kimi_k2:KimiK2ReasoningParser", ("kimik2", "kimi-k2", "kimi_thinking"),
     ("*kimi-k2*thinking*", "*kimi-k2.5*", "*kimi-k2-5*"),
     "Kimi-K2 thinking: <think>…</think>, starts in reasoning; the tool section also ends it"),
    ("step3", "step3:Step3ReasoningParser", ("step3p5",),
     ("*step3*", "*step-3*"), "Step-3/3.5: <think>…</think>, starts in reasoning"),
    ("minimax", "minimax:MiniMaxReasoningParser", ("minimax-m2", "minimax_m2"),
     ("*minimax-m2*", "*mm-m2*"), "MiniMax-M2: <think>…</think>, starts in reasoning"),
    ("minimax_append_think", "minimax:MiniMaxAppendThinkReasoningParser",
     ("minimax-append-think", "minimax_m2_append_think"), (),
     "MiniMax-M2, not separated: <think> put back in front, all normal text"),
    ("mistral", "mistral:MistralReasoningParser", ("magistral",),
     ("*magistral*",), "Magistral: [THINK]…[/THINK]"),
    ("cohere_cmd", "cohere_cmd:CohereCmdReasoningParser", ("cohere_command4", "cohere"),
     ("*command-a*", "*command-r*", "*c4ai-command*"),
     "Cohere Command: <|START_THINKING|>…<|END_THINKING|>"),
    ("granite", "granite:GraniteReasoningParser", (),
     ("*granite-3.2*",), 'Granite 3.2: "Here is my thought process:" … "Here is my response:"'),
    ("nano_v3", "nano_v3:NanoV3ReasoningParser", ("nemotron-3", "nemotron_3", "nemotron_v3"),
     ("*nemotron-3*", "*nemotron-nano*", "*nemotron-super*", "*nano-v3*"),
     "Nemotron 3: <think>…</think>, thinking per request"),
    ("seed_oss", "seed_oss:SeedOssReasoningParser", ("seed-oss",),
     ("*seed-oss*",), "Seed-OSS: <seed:think>…</seed:think>"),
    ("gpt_oss", "gpt_oss:GptOssReasoningParser", ("gpt-oss", "harmony", "openai_gptoss"),
     ("*gpt-oss*",), "gpt-oss harmony: analysis channel is reasoning, the rest passes through"),
)  # fmt: skip


@hookimpl
def turnout_register_reasoning_parsers(register: ReasoningParserRegister) -> None:
    """Register every built-in reasoning parser by its lazy import path."""
    for name, target, aliases, models, description in BUILTIN_REASONING_PARSERS:
        register(name, f"{_PKG}.{target}", aliases=aliases, models=models, description=description)
