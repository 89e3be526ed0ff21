"""flash-attention's layer norm loads a row in trips of a warp's vectors, each trip guarded by the
count of trips that stay in the row from the thread's own column c, `it < (n - 1 - c + V) / V`,
and its index started at `row * n + c` and stepped by V a trip. Intervals alone take the trips at
the smallest c and the index at the largest: a row's last loads reached up to a trip past its end
(no shape fitted; on a GPU the guessed one was written past). The guard is `c + V * it <= n - 1`."""
from astra_cuda.model import access, source

ROWS = """template <bool Even>
__global__ void rows(const float* x, float* z, int rows, int cols) {
  const int c = threadIdx.x;
  const int num_valid = (cols / 4 - 1 - c + 32) / 32;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    int idx = row * cols / 4 + c;
    for (int it = 0; it < 4; it++) {
      if (Even || (it < num_valid)) {
        reinterpret_cast<float4*>(z)[idx] = reinterpret_cast<const float4*>(x)[idx];
        idx += 32;
      }
    }
  }
}
"""


def test_a_trip_count_from_the_threads_column_bounds_the_stepped_index_at_the_rows_end():
    k = source.parse(ROWS).kernel("rows")
    for cols in (200, 256, 300):   # rows of 50, 64, 75 vectors: partial trips for 50 and 75
        f = access.analyse(k, {"cols": cols, "rows": 3}, (2, 1, 1), (32, 1, 1), {"x": 4, "z": 4}, set(), 100,
                           {"Even": 0})
        assert f.uses["x"].hi == f.uses["z"].hi == 3 * cols - 1, (cols, f.uses["x"].hi)


def test_the_bound_is_not_taken_where_the_index_does_not_start_at_the_column():
    """The same guard over an index started at another thread's column (`c + 1`) bounds nothing
    it does not hold for: the extent stays the intervals' (one vector more at the row's end)."""
    k = source.parse(ROWS.replace("int idx = row * cols / 4 + c;", "int idx = row * cols / 4 + c + 1;")).kernel("rows")
    f = access.analyse(k, {"cols": 256, "rows": 3}, (2, 1, 1), (32, 1, 1), {"x": 4, "z": 4}, set(), 100, {"Even": 0})
    assert f.uses["x"].hi >= 3 * 256 + 3
