"""Where Qwen3.8-Flash-Next's PLE n-gram tables live with tensor parallelism, measured, and what
VLLM_PLE_CPU_OFFLOAD=1 (EngramConfig.cpu_offload) changes, read from vLLM 0.32's code.

Measured here: vLLM's Qwen4ExpNGramEmbedding in 1 and in 2 tensor-parallel processes (gloo, vLLM's
distributed state), with a table of about 244 MiB: each rank allocates and faults in only its
vocabulary slice (the table split over the engram TP group, which is the TP group unless
embedding_across_dp), loads exactly its rows from the checkpoint-layout shards, and the ranks' slices
add up to one table: at TP 2 each process grows by half the TP-1 process's growth.

Not measurable here: the pinned variant itself. With cpu_offload=True vLLM builds
Qwen4ExpPLEPinnedHostEmbedding, whose allocate_embedding_weight is the same slice allocated with
torch.empty(..., pin_memory=True) in host memory, then viewed through UVA; CPU-only torch has no
pinned allocator ("pin_memory=True requires a CUDA or other accelerator backend", the first test).
The slice is the same base class (PLEVocabParallelEmbedding over the ETP group) in both variants,
so with VLLM_PLE_CPU_OFFLOAD=1 and TP 4 the node's host holds one TP-sharded copy: four quarters,
one pinned in each worker process (there is no separate offload process in vLLM 0.32). Data-parallel
replicas each hold their own copy: vLLM's EngramConfig.dp_shared_memory and use_thp are implemented
by DeepSeek-V4.1 only; the Qwen4Exp code never reads them (the last test).
"""

import json
import pathlib
import socket
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vllm_server import runfile  # noqa: E402

MODEL = runfile("models/tiny_qwen4_exp/config.json").parent
NO_TORCHVISION = runfile("tests/engine/no_torchvision/torchvision/__init__.py").parents[1]
# 4 n-gram heads of ~1M rows each x 32 dims x 2 bytes: a ~244 MiB table.
BASE = 1_000_000
_CONFIG = json.loads((MODEL / "config.json").read_text())
# Each n-gram head's embedding width: the PLE width shared by (ngram_size - 1) x heads_per_ngram heads.
ROW_DIMS = _CONFIG["ple_embed_dim"] // ((_CONFIG["ngram_size"] - 1) * _CONFIG["heads_per_ngram"])
MIB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world):
    import os

    port = free_port()
    # VLLM_DIST_IDENT: what vLLM's CPU executor sets for its shared-memory collectives' group name.
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", VLLM_DIST_IDENT=f"ple-test-{port}",
               PYTHONPATH=os.pathsep.join([str(NO_TORCHVISION), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, str(HERE / "ple_rank_worker.py"), str(MODEL), str(world), str(rank),
                               str(port), str(BASE)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, start_new_session=True) for rank in range(world)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return sorted(results, key=lambda r: r["rank"])


@pytest.fixture(scope="module")
def measured():
    return {world: run_ranks(world) for world in (1, 2)}


def test_each_rank_holds_and_loads_only_its_slice(measured):
    for world, ranks in measured.items():
        rows = ranks[0]["table_rows"]
        assert [(r["first"], r["last"]) for r in ranks] == [(k * rows // world, (k + 1) * rows // world)
                                                          for k in range(world)], ranks
        for r in ranks:
            assert r["rows"] == rows // world and r["bytes"] == (rows // world) * ROW_DIMS * 2
            assert r["loaded_own_rows"], r


def test_ranks_add_up_to_one_table_of_host_memory(measured):
    one = measured[1][0]
    assert one["bytes"] > 96 * MIB
    # Resident growth matches the allocation (within 4 MiB of page-level noise) ...
    for ranks in measured.values():
        for r in ranks:
            assert abs(r["resident_growth"] - r["bytes"]) < 4 * MIB, r
    # ... and the TP-2 ranks together hold what the TP-1 rank holds: one copy, not one per rank.
    total = sum(r["resident_growth"] for r in measured[2])
    assert abs(total - one["resident_growth"]) < 4 * MIB, (total, one)
    tp2 = ", ".join("+%.1f" % (r["resident_growth"] / MIB) for r in measured[2])
    print("table %.1f MiB; TP1 rank +%.1f MiB resident; TP2 ranks %s MiB" % (
        one["bytes"] / MIB, one["resident_growth"] / MIB, tp2))


def test_pinned_table_needs_an_accelerator_allocator():
    import torch

    with pytest.raises(RuntimeError, match="pin_memory"):
        torch.empty(16, 16, pin_memory=True)


def test_qwen4_exp_code_never_reads_the_dp_sharing_options():
    import vllm

    package = pathlib.Path(vllm.__file__).parent
    qwen = "".join(p.read_text() for p in (package / "models" / "qwen4_exp").rglob("*.py"))
    deepseek = "".join(p.read_text() for p in (package / "models" / "deepseek_v41").rglob("*.py"))
    for option in ("dp_shared_memory", "use_thp"):
        assert option not in qwen and option in deepseek, option
    assert "pin_memory=True" in qwen and "cpu_offload" in qwen


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider", "--durations=0"]))
