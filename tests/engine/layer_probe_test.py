"""tests/device/layer_probe.py, the GPU machine's tool for finding the first module where a model
parts from transformers float32, run here on vLLM's CPU build (SM "native": no emulation) with the
tiny Qwen3: its hooks fire in vLLM's model and in transformers', the module names they share are
compared in vLLM's call order, and vLLM's bf16 modules sit within bf16 error of float32."""

import json
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import install_plugin, plugin_wheel, runfile, server_env  # noqa: E402

PLUGIN = plugin_wheel()
PROBE = runfile("tests/device/layer_probe.py")
QWEN3 = runfile("models/tiny_qwen3/config.json").parent
REFERENCE = runfile("models/tiny_qwen3_reference.json")
# The probe imports models.reference: the folder holding models/ (runfiles root or workspace).
ROOT = runfile("models/sm_table.json").parent.parent


def test_layer_probe_compares_every_shared_module_in_call_order():
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="layer-probe-"))
    plugin = install_plugin(PLUGIN, workdir / "plugin")
    env = server_env(plugin, workdir, {"VLLM_BACKPORT_SM_TABLE": str(ROOT / "models" / "sm_table.json")})
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{ROOT}"
    out = workdir / "probe.json"
    done = subprocess.run([sys.executable, str(PROBE), "qwen3", "native", str(QWEN3), str(REFERENCE), str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads(out.read_text())
    rows = {row["module"]: row for row in report["rows"]}
    order = [row["module"] for row in report["rows"]]
    assert report["prompt_tokens"] == len(json.loads(REFERENCE.read_text())["cases"][0]["prompt"])
    for layer in range(2):
        for part in ("input_layernorm", "self_attn.o_proj", "post_attention_layernorm", "mlp.down_proj"):
            row = rows[f"model.layers.{layer}.{part}"]
            assert 0 < row["rel_err"] < 0.05, row  # bf16 against float32, not zero and not far
    assert order.index("model.layers.0.self_attn.o_proj") < order.index("model.layers.1.input_layernorm")
    assert order[0] == "model.embed_tokens" and order[-1] == "model.norm"


if __name__ == "__main__":
    import pytest

    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
