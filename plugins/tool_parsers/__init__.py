"""Built-in tool-call parsers, registered lazily: a parser module is imported only when chosen."""

from __future__ import annotations

from turnout.hookspecs import ToolParserRegister, hookimpl

_PKG = "turnout.plugins.tool_parsers"

# (canonical name, "module:Class", aliases, model-name patterns, description)
BUILTIN_TOOL_PARSERS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...], str], ...] = (
    ("json", "json_parser:JsonToolParser", (),
     ("*gpt-4*", "*gpt-3.5*", "*claude-*", "*gemini-*", "*gemma-*"),
     'bare JSON {"name", "arguments"} object or array of them'),
    ("llama", "llama:LlamaToolParser", ("llama3", "llama3_json", "llama4_json"),
     ("*llama-3*", "*llama3*"), 'Llama 3.x: <|python_tag|>{"name", "parameters"}; separated by ;'),
    ("mistral", "mistral:MistralToolParser", (),
     ("*mistral*", "*mixtral*", "*devstral*", "*magistral*"),
     "Mistral: [TOOL_CALLS] [...] or [TOOL_CALLS]name[ARGS]{...}"),
    ("qwen", "qwen:QwenToolParser", ("qwen25", "hermes", "qwen3_json"),
     ("*qwen*", "*hermes*"), "Qwen 2.5/3, Hermes: <tool_call>{json}</tool_call>"),
    ("qwen3_coder", "qwen3_coder:Qwen3CoderToolParser", ("qwen_xml", "qwen_coder", "qwen3_xml"),
     ("*qwen3-coder*", "*qwen3.5*", "*qwen3.6*", "*nemotron-3*"),
     "Qwen3-Coder: <tool_call><function=NAME><parameter=KEY>value</parameter>..."),
    ("deepseek_v3", "deepseek_v3:DeepSeekV3ToolParser", ("deepseekv3",),
     ("*deepseek-v3*", "*deepseek-r1*"), "DeepSeek V3/R1: tool-call tokens + ```json fences"),
    ("deepseek_v31", "deepseek_v31:DeepSeekV31ToolParser", ("deepseekv31",),
     ("*deepseek-v3.1*", "*deepseek-v3.2-exp*"), "DeepSeek V3.1: NAME<｜tool▁sep｜>{json}"),
    ("deepseek_v32", "deepseek_v32:DeepSeekV32ToolParser", ("deepseekv32", "dsml"),
     ("*deepseek-v3.2*",), "DeepSeek V3.2 DSML <｜DSML｜function_calls>"),
    ("deepseek_v4", "deepseek_v4:DeepSeekV4ToolParser", ("deepseekv4",),
     ("*deepseek-v4*",), "DeepSeek V4 DSML <｜DSML｜tool_calls>"),
    ("kimi_k2", "kimi_k2:KimiK2ToolParser", ("kimik2",),
     ("*kimi-k2*",), "Kimi-K2: <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>"),
    ("glm45", "glm45:Glm45ToolParser", ("glm", "glm45_moe"),
     ("*glm-4.5*", "*glm-4.6*"), "GLM-4.5/4.6: <tool_call>NAME <arg_key>/<arg_value> lines"),
    ("glm47", "glm47:Glm47ToolParser", ("glm47_moe",),
     ("*glm-4.7*", "*glm-5*"), "GLM-4.7/5: <tool_call>NAME<arg_key>..</arg_key><arg_value>.."),
    ("step3", "step3:Step3ToolParser", (),
     ("*step3*", "*step-3*"), "Step-3: <steptml:invoke name=...> parameters"),
    ("minimax_m2", "minimax_m2:MiniMaxM2ToolParser", ("minimax-m2",),
     ("*minimax*",), "MiniMax-M2: <minimax:tool_call><invoke name=...><parameter name=...>"),
    ("gpt_oss", "gpt_oss:GptOssToolParser", ("gpt-oss", "harmony"),
     ("*gpt-oss*",), "gpt-oss harmony: commentary to=functions.NAME; final channel is content"),
    ("pythonic", "pythonic:PythonicToolParser", ("llama4_pythonic",),
     ("*llama-4*",), "Python call list: [f(a=1), g()]"),
    ("cohere", "cohere:CohereToolParser", ("cohere_command4",),
     ("*command-r*", "*command-a*", "*c4ai-command*"),
     "Cohere Command: <|START_ACTION|>[...]<|END_ACTION|>"),
    ("seed_oss", "seed_oss:SeedOssToolParser", (),
     ("*seed-oss*",), "Seed-OSS: <seed:tool_call><function=NAME><parameter=KEY>..."),
    ("granite", "granite:GraniteToolParser", (),
     ("*granite*",), "Granite: <|tool_call|>[...] or <tool_call>[...]"),
    ("internlm", "internlm:InternLmToolParser", (),
     ("*internlm*",), "InternLM: <|action_start|><|plugin|>{json}<|action_end|>"),
    ("jamba", "jamba:JambaToolParser", (),
     ("*jamba*",), "Jamba: <tool_calls>[...]</tool_calls>"),
    ("xlam", "xlam:XlamToolParser", (),
     ("*xlam*",), "xLAM: JSON array, bare, fenced, or after [TOOL_CALLS]/<tool_call>"),
)  # fmt: skip


@hookimpl
def turnout_register_tool_parsers(register: ToolParserRegister) -> None:
    """Register every built-in tool parser by its lazy import path."""
    for name, target, aliases, models, description in BUILTIN_TOOL_PARSERS:
        register(
            name,
            f"{_PKG}.{target}",
            aliases=aliases,
            models=models,
            description=description,
        )
