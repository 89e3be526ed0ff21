// Astra CPU backend: cg::reduce lives in the cooperative_groups.h stand-in.
#include <cooperative_groups.h>
