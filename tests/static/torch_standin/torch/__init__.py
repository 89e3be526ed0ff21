# A stand-in for an installed PyTorch, written for Astra's tests: only its headers' place
# (torch/include) is used, found without importing this package.
raise ImportError("the test stand-in for torch is not importable")
