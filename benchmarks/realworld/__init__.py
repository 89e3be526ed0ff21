"""The real-world suite (issue 23): public CUDA kernels, pinned by commit, taken unedited through
what a new user does (`astra kernels` -> `astra spec` -> the spec pasted above the kernel ->
`astra check`, and on a GPU `astra profile` and `astra optimize`). See README.md here."""
