"""Astra: a team of agents that makes the CUDA kernels in your file faster, verified."""
__version__ = "0.1.0"
