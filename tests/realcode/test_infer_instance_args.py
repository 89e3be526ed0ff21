"""Issue 29: where a launch passes its launcher's template parameters and nothing the reader
follows binds them (the launcher's instances made by a macro), the kernel's own explicit
instantiations in its file give the arguments — not a guess (`1`) that picks no case of the
kernel's switch, so that it does next to nothing."""
from astra_cuda import api
from astra_cuda.model import source, spec

UPDATE = """
typedef enum Rule_t { PLAIN = 0, DECAY = 1, CLIPPED = 2 } Rule_t;
template <typename T, int RULE> __global__ void update(T* w, const T* g, float lr, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  switch (RULE) {
    case PLAIN: w[i] = w[i] - lr * (float)g[i]; break;
    case CLIPPED: w[i] = w[i] - lr * fminf(1.0f, (float)g[i]); break;
  }
}
template __global__ void update<float, PLAIN>(float* w, const float* g, float lr, int n);
template __global__ void update<float, CLIPPED>(float* w, const float* g, float lr, int n);

template <typename T, int RULE> void step(T* w, const T* g, float lr, int n) {
  switch (RULE) {
    case PLAIN: case CLIPPED: update<T, RULE><<<(n + 255) / 256, 256>>>(w, g, lr, n); break;
    case DECAY: break;
  }
}
#define MAKE_STEP(rule, type) template void step<type, rule>(type* w, const type* g, float lr, int n);
MAKE_STEP(PLAIN, float) MAKE_STEP(DECAY, float) MAKE_STEP(CLIPPED, float)
"""


def test_the_kernels_explicit_instantiation_gives_what_the_launcher_leaves_unbound(project):
    path = project("opt.cu", UPDATE)
    p = api.infer_spec(api.snapshot(UPDATE, str(path)), "update", run=False)
    k = source.parse(UPDATE).kernel("update")
    m = source.parse(UPDATE[:k.span.start_byte] + p.comment + UPDATE[k.span.start_byte:])
    s = spec.load(m.kernel("update"), m)
    assert s.instantiate in ("<float, PLAIN>", "<float, CLIPPED>"), (s.instantiate, p.notes)
    assert not any("no launch gives it" in n for n in p.notes), p.notes
