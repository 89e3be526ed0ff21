/* Minimal stand-in for the CUDA toolkit's crt/host_defines.h, used only when the CUDA headers
   come from a wheel that lacks it. Host compilation only (the Astra CPU backend). */
#ifndef __HOST_DEFINES_H__
#define __HOST_DEFINES_H__
#define __no_return__ __attribute__((noreturn))
#ifndef __forceinline__
#define __forceinline__ __inline__ __attribute__((always_inline))
#endif
#define __inline_hint__
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif
#define __thread__ __thread
#define __import__
#define __export__
#define __cdecl
#define __annotate__(a)
#define __location__(a)
#define CUDARTAPI
#define CUDARTAPI_CDECL
#define __specialization_static
#define __builtin_align__(a) __align__(a)
#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __global__
#define __global__
#endif
#ifndef __shared__
#define __shared__
#endif
#ifndef __constant__
#define __constant__
#endif
#ifndef __managed__
#define __managed__
#endif
#ifndef __grid_constant__
#define __grid_constant__
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#define __device_builtin__
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
#define __cudart_builtin__
#define __CUDA_ARCH_HAS_FEATURE__(_FEAT) 0
#define __CUDA_HAS_ARCH_FAMILY_SPECIFIC(N) 0
#endif
