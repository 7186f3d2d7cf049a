"""turnout's side of SGLang's scheduler gRPC protocol: stubs, worker client, request builders."""
