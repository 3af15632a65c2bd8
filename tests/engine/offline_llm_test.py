"""The offline API, `vllm.LLM(...)`, in a fresh process: vLLM 0.32.0 loads general plugins in
EngineArgs.__post_init__, so vllm_backport's engine-config hook is in place before the first
engine's create_engine_config (not only from the second engine on). Checked with the DSpark
minimum, which the hook enforces before any engine process starts."""

import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_server import install_plugin, plugin_wheel, runfile, server_env  # noqa: E402

PLUGIN = plugin_wheel()
DSV4 = str(runfile("models/tiny_deepseek_v4/config.json").parent)

SCRIPT = """
import sys
import vllm
try:
    vllm.LLM(model=sys.argv[1], kv_cache_dtype="fp8_ds_mla", enforce_eager=True,
             speculative_config={"method": "dspark", "num_speculative_tokens": 3})
except Exception as error:
    print(f"raised {type(error).__name__}: {error}")
else:
    print("no error")
"""


def test_first_offline_engine_gets_the_plugin_config_checks():
    workdir = tempfile.mkdtemp(prefix="vllm-llm-")
    plugin = install_plugin(PLUGIN, pathlib.Path(workdir) / "plugin")
    done = subprocess.run([sys.executable, "-c", SCRIPT, DSV4], env=server_env(plugin, workdir), capture_output=True,
                          text=True, timeout=300)
    out = done.stdout + done.stderr
    assert "raised DSparkConfigError" in out, out[-3000:]
    assert "the minimum is 5" in out


if __name__ == "__main__":
    import pytest

    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
