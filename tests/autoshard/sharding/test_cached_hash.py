"""Mesh and TensorSharding compute their hash once; the cached value never travels.

String hashes are salted per process, so a hash pickled in one process (a sweep worker, a
Dask task) would be wrong in another: the cache must be left out of the pickled state and
recomputed there. Checked in a child interpreter with a different hash seed."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys

from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import Partial, Replicate, Shard
from autoshard.sharding.tensor_sharding import TensorSharding


def _sharding() -> TensorSharding:
    mesh = Mesh.parse("dp=2,ep=4,tp=8")
    return TensorSharding(mesh, (Shard(0), Partial("sum"), Replicate()), 2)


def test_hash_is_the_fields_hash() -> None:
    ts = _sharding()
    assert hash(ts) == hash((ts.mesh, ts.placements, ts.ndim, ts.shard_order))
    assert hash(ts.mesh) == hash((ts.mesh.axes, ts.mesh.devices))
    assert hash(ts) == hash(ts)  # the cached value


def test_cached_hash_is_not_pickled() -> None:
    ts = _sharding()
    hash(ts)
    back = pickle.loads(pickle.dumps(ts))
    assert "_hash" not in back.__dict__ and "_hash" not in back.mesh.__dict__
    assert back == ts and hash(back) == hash(ts)
    assert copy.deepcopy(ts) == ts


def test_pickled_sharding_keys_a_dict_in_another_process() -> None:
    ts = _sharding()
    hash(ts)
    code = ("import pickle, sys\n"
            "from autoshard.sharding.mesh import Mesh\n"
            "from autoshard.sharding.placements import Partial, Replicate, Shard\n"
            "from autoshard.sharding.tensor_sharding import TensorSharding\n"
            "ts = pickle.loads(sys.stdin.buffer.read())\n"
            "fresh = TensorSharding(Mesh.parse('dp=2,ep=4,tp=8'),"
            " (Shard(0), Partial('sum'), Replicate()), 2)\n"
            "print({fresh: 1}.get(ts), {ts.mesh: 2}.get(fresh.mesh))\n")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(ts),
                          capture_output=True, env=env, check=True)
    assert done.stdout.decode().split() == ["1", "2"]
