"""Per-tensor exporters: a `TensorSharding` written as XLA HloSharding (V2 iota or V1 device
list), Shardy ``#sdy.sharding``, PyTorch DTensor placements and JAX PartitionSpec.

All of them start from one normal form, `layout_of` (per tensor dim, the mesh (sub-)axes that
shard it, major → minor, plus the pending reduction), so the formats cannot disagree about the
layout. Each exporter refuses what its format cannot express with an `ExportError` naming the
tensor, dim and axis; `check_exportable` adds the non-divisible-shape rules per format.

Per plan: `plan_shardings` reads a saved plan back, `lower_plan_reshards` lowers every explicit
reshard to named collectives (refusing a plan whose priced collectives differ), and
`export_plan` writes the whole plan in one format (``autoshard export``), including runnable
DTensor and JAX scripts that run every priced step as exactly one collective and count what
runs (`autoshard.export.dtensor_script`, `autoshard.export.jax_script`, with their runtimes
`autoshard.export.dtensor_runtime` and `autoshard.export.jax_runtime`).
torch and jax are imported only inside the functions that return their objects.
"""

from autoshard.export.check import ExportCheck, ExportFormat, check_exportable
from autoshard.export.dtensor import (
    DTENSOR_IMPORTS,
    DTensorPlacement,
    dtensor_mesh_source,
    dtensor_placements,
    to_dtensor,
    to_dtensor_source,
)
from autoshard.export.errors import (
    ExportError,
    HloParseError,
    NotDivisibleExportError,
    NotExpressibleError,
)
from autoshard.export.hlo import layout_to_hlo_sharding, to_hlo_sharding
from autoshard.export.hlo_value import (
    HloKind,
    HloShardingValue,
    SubgroupType,
    TileAssignment,
    canonical_iota,
    hlo_shardings_equal,
    parse_hlo_sharding,
)
from autoshard.export.jax_spec import (
    jax_mesh_source,
    partition_spec_entries,
    partition_spec_source,
    to_jax_partition_spec,
)
from autoshard.export.layout import AxisRef, ShardingLayout, layout_of
from autoshard.export.lowering import (
    LoweredCollective,
    LoweredReshard,
    ReshardMismatchError,
    lower_plan_reshards,
    lower_reshard,
    sharding_text,
    shardy_op,
)
from autoshard.export.plan_export import PlanFormat, export_plan, plan_json
from autoshard.export.plan_view import (
    PlanMismatchError,
    PlanShardings,
    check_fingerprint,
    plan_links,
    plan_shardings,
)
from autoshard.export.shardy import (
    layout_to_shardy,
    parse_shardy,
    parse_shardy_mesh,
    shardy_dims,
    shardy_mesh,
    shardy_to_hlo_sharding,
    to_shardy,
)

__all__ = [
    "DTENSOR_IMPORTS",
    "AxisRef",
    "DTensorPlacement",
    "ExportCheck",
    "ExportError",
    "ExportFormat",
    "HloKind",
    "HloParseError",
    "HloShardingValue",
    "LoweredCollective",
    "LoweredReshard",
    "NotDivisibleExportError",
    "NotExpressibleError",
    "PlanFormat",
    "PlanMismatchError",
    "PlanShardings",
    "ReshardMismatchError",
    "ShardingLayout",
    "SubgroupType",
    "TileAssignment",
    "canonical_iota",
    "check_exportable",
    "check_fingerprint",
    "dtensor_mesh_source",
    "dtensor_placements",
    "export_plan",
    "hlo_shardings_equal",
    "jax_mesh_source",
    "layout_of",
    "layout_to_hlo_sharding",
    "layout_to_shardy",
    "lower_plan_reshards",
    "lower_reshard",
    "parse_hlo_sharding",
    "parse_shardy",
    "parse_shardy_mesh",
    "partition_spec_entries",
    "partition_spec_source",
    "plan_json",
    "plan_links",
    "plan_shardings",
    "sharding_text",
    "shardy_dims",
    "shardy_mesh",
    "shardy_op",
    "shardy_to_hlo_sharding",
    "to_dtensor",
    "to_dtensor_source",
    "to_hlo_sharding",
    "to_jax_partition_spec",
    "to_shardy",
]
