"""nccl-tests parsing: the shipped vendor tables as read, and one clear error per bad input."""
# ruff: noqa: E501  (nccl-tests rows are wider than 100 columns; kept in their real layout)

from __future__ import annotations

from importlib import resources

import pytest

from costmodel import CollectiveKind, NcclTestsError, parse_nccl_tests, read_nccl_tests
from costmodel.nccl_tests import BEST_COLUMN, BUSBW_COLUMN

DATA = resources.files("costmodel") / "data" / "nccl_tests"
P4DE = str(DATA / "aws-p4de-2node-16xA100-80GB-efa400-allreduce.txt")
OCI = str(DATA / "oci-bm-gpu4.8-2node-16xA100-40GB-roce-allreduce.txt")
AZURE = str(DATA / "azure-nda100v4-1node-8xA100-busbw-only.txt")

HEADER = """# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid 1 on alpha device  0 [0x0f] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid 2 on alpha device  1 [0x15] NVIDIA A100-SXM4-80GB
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
"""
ROWS = """     1048576        262144     float     sum      -1    100.0   10.49   10.49      0    98.00   10.70   10.70      0
     2097152        524288     float     sum      -1    150.0   13.98   13.98      0    160.0   13.11   13.11      0
"""


def test_p4de_table_with_launcher_prefixes() -> None:
    table, = read_nccl_tests(P4DE, nodes=2, gpus_per_node=8)
    assert (table.collective, table.ranks, table.nodes) == (CollectiveKind.ALL_REDUCE, 16, 2)
    assert len(table.nbytes) == 29 and table.nbytes[0] == 8 and table.nbytes[-1] == 2**31
    # first row: out-of-place 164.3, in-place 163.3 -> the better, 163.3; last row both 51406
    assert table.time_us[0] == 163.3 and table.time_us[-1] == 51406.0
    assert table.time_us[18] == 397.4  # 2 MiB: out-of-place 432.6, in-place 397.4
    assert table.column == BEST_COLUMN


def test_oci_table_reads_ranks_and_hosts_from_its_header() -> None:
    table, = read_nccl_tests(OCI)
    assert (table.ranks, table.nodes, table.gpus_per_node) == (16, 2, 8)
    assert table.nbytes[-1] == 8 * 2**30 and table.time_us[0] == 34.74
    assert table.time_us[-1] == 67689.0


def test_azure_busbw_only_series_derives_time_from_busbw() -> None:
    table, = read_nccl_tests(AZURE, nodes=1, gpus_per_node=8)
    assert table.column == BUSBW_COLUMN and table.collective is CollectiveKind.ALL_REDUCE
    assert table.nbytes[:3] == (1024, 2048, 4096) and table.nbytes[6] == 65536
    assert table.nbytes[-1] == 8 * 2**30
    # time = size · 2(n−1)/n / busbw: 1 KiB at 0.04 GB/s busbw over 8 ranks
    assert table.time_us[0] == pytest.approx(1024 * 1.75 / 0.04e3)
    assert table.time_us[-1] == pytest.approx(8 * 2**30 * 1.75 / 231.58e3)


def test_without_header_the_caller_must_say_nodes() -> None:
    with pytest.raises(NcclTestsError, match="--nodes N --gpus-per-node G") as info:
        read_nccl_tests(P4DE)
    assert info.value.file == P4DE and info.value.line == 14


def test_wrong_rank_counts_contradict_the_bus_factor() -> None:
    with pytest.raises(NcclTestsError, match=r"bus factor 1\.750"):
        read_nccl_tests(P4DE, nodes=1, gpus_per_node=8)


def test_caller_counts_must_agree_with_the_header() -> None:
    with pytest.raises(NcclTestsError, match="16 ranks on 2 hosts"):
        read_nccl_tests(OCI, nodes=1, gpus_per_node=16)


@pytest.mark.parametrize("prefix", ["0: ", "[1,0]<stdout>: ", ""])
def test_prefixes_and_header_counts(prefix) -> None:
    text = "".join(prefix + line + "\n" for line in (HEADER + ROWS).splitlines())
    table, = parse_nccl_tests(text, "run_all_reduce_perf.log")
    assert (table.ranks, table.nodes) == (2, 1)
    assert table.nbytes == (1048576, 2097152) and table.time_us == (98.0, 150.0)


def test_several_tables_in_one_file() -> None:
    gather = ROWS.replace("sum", "none").replace("10.49   10.49", "10.49    5.25").replace(
        "10.70   10.70", "10.70    5.35").replace("13.98   13.98", "13.98    6.99").replace(
        "13.11   13.11", "13.11    6.56")
    text = ("# all_reduce_perf -b 1M -e 2M\n" + HEADER + ROWS
            + "# all_gather_perf -b 1M -e 2M\n" + HEADER + gather)
    first, second = parse_nccl_tests(text, "runs.txt")
    assert first.collective is CollectiveKind.ALL_REDUCE and first.name == "runs.txt#1"
    assert second.collective is CollectiveKind.ALL_GATHER and second.name == "runs.txt#2"


@pytest.mark.parametrize(("text", "line", "culprit"), [
    ("hello world\n", 1, "not a line of nccl-tests output"),
    ("", 0, "no nccl-tests table found"),
    ("# only comments\n#\n", 0, "no nccl-tests table found"),
    (HEADER + ROWS.splitlines()[1] + "\n" + ROWS.splitlines()[0] + "\n", 6,
     "does not increase"),
    (HEADER + ROWS.replace("150.0", "-150.0", 1), 6, "time = -150.0 must be positive"),
    (HEADER + ROWS.replace("0    160.0", "3    160.0"), 6, "#wrong = 3"),
    (HEADER + ROWS.replace("13.98   13.98", "99.00   13.98"), 6, "not size/time"),
    (HEADER + "| 1K | 0.04 |\n", 5, "size label '1K' has no byte count"),
], ids=["not-nccl", "empty", "no-rows", "sizes", "negative", "wrong", "algbw", "labels"])
def test_bad_tables_are_one_error_naming_file_and_line(text, line, culprit) -> None:
    with pytest.raises(NcclTestsError, match=culprit) as info:
        parse_nccl_tests(text, "bad_all_reduce.txt")
    assert info.value.file == "bad_all_reduce.txt" and info.value.line == line
    assert str(info.value).startswith("bad_all_reduce.txt")


def test_unknown_collective_must_be_named() -> None:
    with pytest.raises(NcclTestsError, match="cannot tell which collective"):
        parse_nccl_tests(HEADER + ROWS, "run.txt")
    table, = parse_nccl_tests(HEADER + ROWS, "run.txt", collective="all_reduce")
    assert table.collective is CollectiveKind.ALL_REDUCE


def test_alltoall_and_sendrecv_bus_factors() -> None:
    a2a = ROWS.replace("10.49   10.49", "10.49    5.25").replace(
        "10.70   10.70", "10.70    5.35").replace("13.98   13.98", "13.98    6.99").replace(
        "13.11   13.11", "13.11    6.56")
    table, = parse_nccl_tests(HEADER + a2a, "alltoall_perf.txt")
    assert table.collective is CollectiveKind.ALL_TO_ALL
    table, = parse_nccl_tests(HEADER + ROWS, "sendrecv_perf.txt")
    assert table.collective is CollectiveKind.COLLECTIVE_PERMUTE
