"""``--executor dask`` against a LocalCluster started here: the same rows as the local run."""

from __future__ import annotations

import csv
from pathlib import Path

import distributed  # the dask extra: CI installs it, so this test never skips
from click.testing import CliRunner

from autoshard.cli import main
from autoshard.sweep import runner as sweep_runner
from autoshard.sweep.table import TIMING_COLUMNS

TINY_MLP = ("--model", "mlp", "--layers", "1", "--hidden", "256", "--ffn", "1024",
            "--batch", "8", "--seq", "16", "--devices", "2,4", "--axes", "1-2",
            "--memory", "800KiB")


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS}
                for row in csv.DictReader(handle)]


def test_dask_local_cluster_gives_the_local_rows(tmp_path: Path) -> None:
    runner = CliRunner()
    local = runner.invoke(main, ["sweep", *TINY_MLP, "--out", str(tmp_path / "local")],
                          catch_exceptions=False)
    assert local.exit_code == 0, local.output
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        remote = runner.invoke(main, ["sweep", *TINY_MLP, "--out", str(tmp_path / "dask"),
                                      "--executor", "dask", "--scheduler",
                                      cluster.scheduler_address], catch_exceptions=False)
    assert remote.exit_code == 0, remote.output
    assert rows(tmp_path / "dask" / "sweep.csv") == rows(tmp_path / "local" / "sweep.csv")
    assert len(rows(tmp_path / "dask" / "sweep.csv")) == 3
    plans = sorted(p.relative_to(tmp_path / "dask") for p in (tmp_path / "dask").rglob("*.json"))
    assert plans == sorted(p.relative_to(tmp_path / "local")
                           for p in (tmp_path / "local").rglob("*.json"))


def test_unreachable_scheduler_is_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("autoshard.sweep.runner.DASK_CONNECT_TIMEOUT_S", 1.0)
    result = CliRunner().invoke(main, ["sweep", *TINY_MLP, "--out", str(tmp_path / "x"),
                                       "--executor", "dask", "--scheduler",
                                       "tcp://127.0.0.1:9"], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert "tcp://127.0.0.1:9" in result.output


def test_each_point_takes_its_hosts_share_of_the_cores(monkeypatch) -> None:
    """Two single-thread workers on one host: every point's solver gets half the cores."""
    shares = []
    monkeypatch.setattr(sweep_runner, "share_cores", shares.append)
    monkeypatch.setattr(sweep_runner, "run_point", lambda point, settings: point)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        threads = sweep_runner.threads_per_host(client.scheduler_info()["workers"])
        assert list(threads.values()) == [2]
        futures = [client.submit(sweep_runner._run_on_dask_worker, n, None, threads,
                                 pure=False) for n in range(4)]
        assert sorted(client.gather(futures)) == [0, 1, 2, 3]
    assert shares == [2, 2, 2, 2]


def test_threads_per_host_adds_up_the_workers_of_each_host() -> None:
    workers = {"tcp://10.0.0.1:1": {"host": "10.0.0.1", "nthreads": 4},
               "tcp://10.0.0.1:2": {"host": "10.0.0.1", "nthreads": 2},
               "tcp://10.0.0.2:1": {"host": "10.0.0.2", "nthreads": 8}}
    assert sweep_runner.threads_per_host(workers) == {"10.0.0.1": 6, "10.0.0.2": 8}
