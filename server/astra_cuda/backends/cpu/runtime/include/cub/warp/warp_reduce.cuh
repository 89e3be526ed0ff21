// Astra CPU backend stand-in: see cub/cub.cuh.
#include <cub/cub.cuh>
