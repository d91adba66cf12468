"""costmodel: hardware and link models — bytes, group sizes and links in, seconds out.

Why it exists: the planner must price every strategy and every resharding step of a model on a
mesh. This package holds the alpha-beta (Hockney) collective formulas of Thakur, Rabenseifner &
Gropp (2005) and NCCL, a compute roofline, and named hardware presets with their sources.

Promises: pure and deterministic; knows nothing of graphs, placements or solvers (it imports
none of them); mesh axis names appear only as opaque strings in ``Topology.axis_links``. A
collective runs over a *group* described as levels ``((size, link), ...)`` inner→outer; the
byte conventions per collective kind are documented in :mod:`costmodel.collectives`.
Every function that takes byte counts accepts NumPy arrays and is vectorized.

Example:
    >>> from costmodel import CollectiveKind, collective_seconds, get_preset
    >>> h100 = get_preset("dgx-h100")
    >>> nvlink = h100.levels[0].link
    >>> seconds = collective_seconds(CollectiveKind.ALL_REDUCE, 1e9, ((8, nvlink),))
    >>> round(seconds * 1e3, 2)  # measured-curve model: 2·7/8·1 GB at 370 GB/s busbw + ramp
    5.34
    >>> textbook = Link(nvlink.alpha_s, nvlink.beta_s_per_byte)  # the same link, pure alpha-beta
    >>> round(collective_seconds(CollectiveKind.ALL_REDUCE, 1e9, ((8, textbook),)) * 1e3, 2)
    3.89

Two collective models: links that set none of the measured-curve fields (``launch_s``,
``pipeline_s``, ``bus_efficiency``) are priced by the textbook alpha-beta formulas of
:mod:`costmodel.collectives`; links that set them (the GPU presets do) by the size-aware model
of :mod:`costmodel.measured`, whose parameters :mod:`costmodel.calibrate` fits to nccl-tests
tables read by :mod:`costmodel.nccl_tests`.

Two compute models: a device without ``kernels`` parameters prices every kernel by a flat
roofline (:func:`compute_seconds`); a device with them (the H100 and A100 presets) prices a
:class:`Gemm` by tile and wave quantisation, an :class:`Attention` by measured FlashAttention
throughput, and other ops as memory-bound (:func:`kernel_seconds`);
:func:`calibrate_gemm` fits the GEMM terms to a matmul benchmark table.
"""

from costmodel.attention_kernels import AttentionKernel, with_attention_kernel
from costmodel.calibrate import Calibration, CalibrationRow, calibrate, check
from costmodel.calibrate_gemm import GemmCalibration, calibrate_gemm, check_gemm
from costmodel.collectives import (
    ALGORITHMS,
    CollectiveKind,
    Group,
    binomial_tree_broadcast,
    binomial_tree_reduce,
    collective_seconds,
    flat_seconds,
    hierarchical_seconds,
    pairwise_all_to_all,
    point_to_point_permute,
    rabenseifner_all_reduce,
    recursive_doubling_all_gather,
    recursive_doubling_all_reduce,
    recursive_halving_reduce_scatter,
    reduce_scatter_gather_reduce,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    scatter_allgather_broadcast,
    single_level_seconds,
    slowest_link,
)
from costmodel.compute import compute_seconds, kernel_seconds, peak_flops
from costmodel.errors import (
    CalibrationError,
    CostModelError,
    InvalidValueError,
    LaunchFloorWarning,
    LinkSpecError,
    MatmulTableError,
    NcclTestsError,
    TopologyFileError,
    UnitError,
    UnknownDtypeError,
    UnknownPresetError,
)
from costmodel.kernel_params import AttentionPass, AttentionRate, KernelParams
from costmodel.kernels import Attention, Gemm
from costmodel.launch_floor import PROBE_BYTES, FloorGap, undercut_floor
from costmodel.link import DeviceSpec, Link, Topology, TopologyLevel
from costmodel.linkspec import known_link_names, parse_link_spec
from costmodel.matmul_table import MatmulTable, parse_matmul_table, read_matmul_table
from costmodel.measured import bus_factor, curve_terms
from costmodel.nccl_tests import NcclTable, parse_nccl_tests, read_nccl_tests
from costmodel.presets import NCCL_BASE_LATENCY_S, STANDARD_LINKS, get_preset, preset_names
from costmodel.topology_file import dump_topology, load_topology, loads_topology
from costmodel.units import format_bytes, parse_bandwidth, parse_bytes, parse_duration

__all__ = [
    "ALGORITHMS",
    "NCCL_BASE_LATENCY_S",
    "PROBE_BYTES",
    "STANDARD_LINKS",
    "Attention",
    "AttentionKernel",
    "AttentionPass",
    "AttentionRate",
    "Calibration",
    "CalibrationError",
    "CalibrationRow",
    "CollectiveKind",
    "CostModelError",
    "DeviceSpec",
    "FloorGap",
    "Gemm",
    "GemmCalibration",
    "Group",
    "InvalidValueError",
    "KernelParams",
    "LaunchFloorWarning",
    "Link",
    "LinkSpecError",
    "MatmulTable",
    "MatmulTableError",
    "NcclTable",
    "NcclTestsError",
    "Topology",
    "TopologyFileError",
    "TopologyLevel",
    "UnitError",
    "UnknownDtypeError",
    "UnknownPresetError",
    "binomial_tree_broadcast",
    "binomial_tree_reduce",
    "bus_factor",
    "calibrate",
    "calibrate_gemm",
    "check",
    "check_gemm",
    "collective_seconds",
    "compute_seconds",
    "curve_terms",
    "dump_topology",
    "flat_seconds",
    "format_bytes",
    "get_preset",
    "hierarchical_seconds",
    "kernel_seconds",
    "known_link_names",
    "load_topology",
    "loads_topology",
    "pairwise_all_to_all",
    "parse_bandwidth",
    "parse_bytes",
    "parse_duration",
    "parse_link_spec",
    "parse_matmul_table",
    "parse_nccl_tests",
    "peak_flops",
    "point_to_point_permute",
    "preset_names",
    "rabenseifner_all_reduce",
    "read_matmul_table",
    "read_nccl_tests",
    "recursive_doubling_all_gather",
    "recursive_doubling_all_reduce",
    "recursive_halving_reduce_scatter",
    "reduce_scatter_gather_reduce",
    "ring_all_gather",
    "ring_all_reduce",
    "ring_reduce_scatter",
    "scatter_allgather_broadcast",
    "single_level_seconds",
    "slowest_link",
    "undercut_floor",
    "with_attention_kernel",
]
