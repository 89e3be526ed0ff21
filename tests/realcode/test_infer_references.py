"""Issue 25: an earlier version of a kernel is its reference only where it can be instantiated the
same way — a minimal case written here of cuda-samples' reduction: `reduce6<T, blockSize, nIsPow2>`
was given `reduce5<T, blockSize>` as its reference, which `reduce6`'s `instantiate` cannot name."""
from .test_infer_patterns import infer

BODY = "(T* in, T* out, unsigned n) {\n  unsigned i = blockIdx.x * B + threadIdx.x;\n  if (i < n) out[i] = in[i];\n}\n"


def test_an_earlier_version_with_other_template_parameters_is_no_reference(project):
    project("red.cu", "template <class T, unsigned int B> __global__ void red5" + BODY +
            "template <class T, unsigned int B, bool P> __global__ void red6" + BODY +
            "void launch(int* i, int* o, unsigned n) {\n"
            "  red5<int, 256><<<(n + 255) / 256, 256>>>(i, o, n);\n"
            "  red6<int, 256, false><<<(n + 255) / 256, 256>>>(i, o, n);\n}\n")
    s, _ = infer(project, "red.cu", "red6")
    assert s.reference is None and s.instantiate == "<int, 256, false>"


def test_an_earlier_version_with_the_same_template_parameters_is_the_reference(project):
    project("red.cu", "template <class T, unsigned int B> __global__ void red5" + BODY +
            "template <typename T, unsigned int B> __global__ void red6" + BODY +
            "void launch(int* i, int* o, unsigned n) {\n"
            "  red5<int, 256><<<(n + 255) / 256, 256>>>(i, o, n);\n"
            "  red6<int, 256><<<(n + 255) / 256, 256>>>(i, o, n);\n}\n")
    s, _ = infer(project, "red.cu", "red6")
    assert s.reference == "red5"
