"""`python -m astra.lsp`: run the language server on stdio."""
from astra.lsp.server import main

main()
