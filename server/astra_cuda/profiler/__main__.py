"""`python -m astra_cuda.profiler ncu-driver PAYLOAD.pkl`: the process Nsight Compute profiles."""
import sys

from .ncu import ncu_driver

if len(sys.argv) == 3 and sys.argv[1] == "ncu-driver":
    ncu_driver(sys.argv[2])
else:
    print("usage: python -m astra_cuda.profiler ncu-driver PAYLOAD.pkl", file=sys.stderr)
    sys.exit(2)
