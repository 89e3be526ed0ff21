"""The Astra language server (pygls): diagnostics, checks, code actions, lenses, hovers.

It holds no kernel logic: every answer comes from `astra_cuda.api`, the same core the CLI calls.
"""
