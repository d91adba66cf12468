"""GEMM time from the local shape: tile quantisation, wave quantisation, a small-K penalty.

Why: a sharded matmul is a smaller matmul, and small matmuls do not run at the dense peak.
NVIDIA's "Matrix Multiplication Background User's Guide" (DU-09799-001, sections 2.3 and 3:
https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/) explains
how cuBLAS runs one: the (m × n) output is cut into tiles, one thread block per tile, and the
blocks run in *waves* of one block per SM. So

    tiles  = batch · ⌈m / Tm⌉ · ⌈n / Tn⌉                  (tile quantisation)
    waves  = ⌈tiles · splits / sm_count⌉                   (wave quantisation)
    tile_s = 2 · Tm · Tn · (K̂ / splits + k_overhead) / (peak · gemm_efficiency / sm_count)
    gemm_s = waves · tile_s,   K̂ = ⌈k / Tk⌉ · Tk

a wave costs the same however few of its slots hold a tile (the guide's wave-quantisation
closed form; also stas00/ml-engineering ``training/performance/README.md`` at
7bc7c3054eb93c277a4755c597ae0864d77a63f1, "W = ceil(C/S)"). ``gemm_efficiency`` is the
ceiling a full wave of full tiles reaches; ``k_overhead`` a tile's fixed prologue/epilogue cost
in units of K (the small-K penalty: a K = 256 product cannot amortise the pipeline fill). Both
tile orientations (Tm × Tn and Tn × Tm) are tried, as cuBLAS offers 256×128 and 128×256
(the guide, section 2.3), and the cheaper kept.

Split-K: when the output has fewer tiles than SMs, BLAS libraries split the K loop across
thread blocks and reduce the partial tiles (CUTLASS ``media/docs/efficient_gemm.md``,
"Parallelized Reductions"), so ``splits = min(⌊sm_count / tiles⌋, K̂ / Tk)`` (at least one K
step per split; 1 when the tiles fill the SMs). The reduction itself is not priced. Without
it a 256×512×4096 product would take a whole K loop on 4 SMs: 4× slower than measured on
H100 (``costmodel/data/gemm/``).

The GEMM is memory-bound when its operand traffic at the achievable HBM bandwidth takes
longer (low arithmetic intensity: skinny or small-K products); every kernel also pays the
fixed ``launch_s``:

    seconds = max(gemm_s, bytes / (hbm_bw · hbm_efficiency)) + launch_s
"""

from __future__ import annotations

import math

from costmodel.errors import InvalidValueError
from costmodel.kernel_params import KernelParams
from costmodel.kernels import Gemm
from costmodel.link import DeviceSpec


def params_of(device: DeviceSpec) -> KernelParams:
    """The device's kernel parameters, or a clear error naming the device."""
    if device.kernels is None:
        raise InvalidValueError(f"device {device.name!r} has no kernel-model parameters "
                                "(sm_count, gemm_efficiency, ...); it is priced by the flat "
                                "roofline", field="kernels", value=None)
    return device.kernels


def gemm_waves(gemm: Gemm, tile: tuple[int, int], sm_count: int, splits: int = 1) -> int:
    """Waves of one thread block per SM for ``gemm`` cut into ``tile`` (rows, cols) and
    ``splits`` slices of K.

    Example (the guide's wave quantisation on an A100's 108 SMs, 256×128 tiles):
        >>> gemm_waves(Gemm(m=256 * 12, n=128 * 9, k=64), (256, 128), 108)
        1
        >>> gemm_waves(Gemm(m=256 * 12, n=128 * 9 + 1, k=64), (256, 128), 108)
        2
    """
    return math.ceil(gemm_tiles(gemm, tile) * splits / sm_count)


def gemm_tiles(gemm: Gemm, tile: tuple[int, int]) -> int:
    """Output tiles (thread blocks) of ``gemm`` cut into ``tile`` (rows, cols)."""
    return gemm.batch * math.ceil(gemm.m / tile[0]) * math.ceil(gemm.n / tile[1])


def k_splits(tiles: int, k_steps: int, sm_count: int) -> int:
    """Split-K factor: spread the K loop over idle SMs when the tiles do not fill them.

    Example: 4 output tiles with 64 K steps on 132 SMs split K 33 ways.
        >>> k_splits(4, 64, 132), k_splits(200, 64, 132), k_splits(4, 8, 132)
        (33, 1, 8)
    """
    return max(1, min(sm_count // tiles, k_steps)) if tiles < sm_count else 1


def gemm_compute_seconds(gemm: Gemm, peak_flops_per_s: float, params: KernelParams) -> float:
    """The tile/wave term alone (no memory floor, no launch floor), best orientation."""
    rows, cols = params.gemm_tile
    k_steps = math.ceil(gemm.k / params.gemm_tile_k)
    per_sm = peak_flops_per_s * params.gemm_efficiency / params.sm_count
    best = math.inf
    for tile in ((rows, cols), (cols, rows)):
        splits = k_splits(gemm_tiles(gemm, tile), k_steps, params.sm_count)
        k_per_block = k_steps * params.gemm_tile_k / splits
        tile_s = 2.0 * tile[0] * tile[1] * (k_per_block + params.gemm_k_overhead) / per_sm
        best = min(best, gemm_waves(gemm, tile, params.sm_count, splits) * tile_s)
    return best


def gemm_seconds(gemm: Gemm, bytes_moved: float, peak_flops_per_s: float,
                 device: DeviceSpec) -> float:
    """Seconds of ``gemm`` on ``device`` (module docstring), ``bytes_moved`` its operand
    traffic and ``peak_flops_per_s`` the device's dense peak for the dtype.

    Example: a GEMM whose tiles fill whole waves runs at the ceiling (no launch cost here).
        >>> from costmodel import DeviceSpec, KernelParams
        >>> dev = DeviceSpec(name="toy", peak_flops_per_s={"bf16": 1e12}, hbm_bytes=1,
        ...                  hbm_bw_bytes_per_s=1e15, kernels=KernelParams(
        ...                  sm_count=4, gemm_tile=(128, 128), gemm_efficiency=0.5))
        >>> g = Gemm(m=256, n=256, k=1024)
        >>> round(g.flops / gemm_seconds(g, 0.0, 1e12, dev) / 1e12, 6)
        0.5
    """
    params = params_of(device)
    compute = gemm_compute_seconds(gemm, peak_flops_per_s, params)
    memory = bytes_moved / (device.hbm_bw_bytes_per_s * params.hbm_efficiency)
    return max(compute, memory) + params.launch_s
