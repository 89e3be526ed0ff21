// Astra CPU backend: a stand-in for the toolkit's <mma.h> (found ahead of it on the include path),
// empty on purpose. Tensor-core code cannot run faithfully on the CPU: a kernel that names
// nvcuda::wmma is refused by the source screen ("needs a GPU to verify"), while a file whose
// headers include <mma.h> for other kernels compiles and runs its own kernel.
#ifndef ASTRA_MMA_H
#define ASTRA_MMA_H
#endif
