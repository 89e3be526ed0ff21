// Stand-in for c10's device guard (host only).
#pragma once
namespace c10 { namespace cuda { struct OptionalCUDAGuard { template <class T> explicit OptionalCUDAGuard(const T&) {} }; } }
