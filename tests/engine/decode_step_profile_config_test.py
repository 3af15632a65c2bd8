"""tools/bench/decode_step_profile.py profiles one rank of DeepSeek-V4-Flash at TP 8, 4 and 2 on
one GPU by writing the released widths with what TP shards divided by TP. Held here to vLLM's own
model: the config it writes is accepted by vLLM, and DeepseekV4ForCausalLM built from it with the
plugin's sm8x route (route_probe.py, CPU, meta device, sm86) has, parameter by parameter, the
shapes a rank of `--tensor-parallel-size TP` of the released model holds: attention heads,
o_proj groups, expert and shared-expert widths and vocabulary divided by TP; the indexer, the
query/KV down-projections and the router whole."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import install_plugin, plugin_wheel, runfile  # noqa: E402

TEMPLATE = runfile("models/tiny_deepseek_v4_fp4/config.json").parent
PLUGIN = plugin_wheel()
PROBE = pathlib.Path(__file__).resolve().parent / "route_probe.py"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from tools.bench import decode_step_profile as profile  # noqa: E402


def shapes(tp):
    folder = profile.write_model(pathlib.Path(tempfile.mkdtemp(prefix=f"tp{tp}-")), TEMPLATE, tp, 3, dspark=False)
    plugin = install_plugin(PLUGIN, tempfile.mkdtemp(prefix="plugin-"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([plugin, os.environ.get("PYTHONPATH", "")]),
               HF_HUB_OFFLINE="1", VLLM_CACHE_ROOT=tempfile.mkdtemp(prefix="vllm-cache-"))
    done = subprocess.run([sys.executable, str(PROBE), "--sm", "sm86", "--model", str(folder), "--shapes"], env=env,
                          capture_output=True, text=True, timeout=900)
    line = next((l for l in done.stdout.splitlines() if l.startswith("ROUTE-PROBE ")), None)
    assert done.returncode == 0 and line, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(line[len("ROUTE-PROBE "):])["shapes"]


def one(found, suffix):
    hits = {name: shape for name, shape in found.items() if name.endswith(suffix)}
    assert hits, f"no parameter ends with {suffix}: {sorted(found)[:80]}"
    return next(iter(hits.values()))


@pytest.mark.parametrize("tp", [8, 2])
def test_a_rank_of_tp_holds_the_sharded_widths(tp):
    found = shapes(tp)
    heads, groups, width = 64 // tp, 8 // tp, 2048 // tp
    assert one(found, "layers.2.attn.wq_b.weight")[0] == heads * 512
    assert one(found, "layers.2.attn.wo_b.weight")[1] == groups * 1024
    assert one(found, "layers.2.attn.wo_a.weight")[0] == groups * 1024
    # A rank's vocabulary slice, padded (as vLLM pads every vocabulary) to a multiple of 64.
    assert one(found, "embed_tokens.weight")[0] == -(-129280 // tp // 64) * 64
    w13 = one(found, "layers.2.ffn.experts.routed_experts.w13_weight")
    assert w13[0] == 256 and w13[1] == 2 * width, w13
    assert one(found, "layers.2.ffn.shared_experts.gate_up_proj.weight")[0] == 2 * width
    # Replicated whatever the TP: the 64-head indexer and the router.
    assert one(found, "layers.2.attn.indexer.wq_b.weight")[0] == 64 * 128
    assert one(found, "layers.2.ffn.gate.weight")[0] == 256


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "--durations=0"]))
