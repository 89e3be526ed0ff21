"""`python -m astra_cuda.lsp`: run the language server on stdio."""
from astra_cuda.lsp.server import main

main()
