"""The HTTP side of turnout: a Litestar app serving the OpenAI and SGLang APIs."""
