"""GLM-5.3-Flash: vLLM's Glm5NextForCausalLM (sparse-MLA layers with a DeepGEMM indexer, KDA linear
attention, mHC, MTP). Work in progress on sm8x, as the product has always said: the pieces below
have no sm8x implementation yet (shared/notes/dsv4-sm8x-gaps.md section 3), so the plugin refuses
to start it on sm80/86/89 and names them.
"""

from models import support

SMS = ("sm80", "sm86", "sm89")

_MISSING_ALL = [
    "sparse-MLA attention backend (every vLLM candidate needs compute capability 9.x/10.x)",
    "indexer logits (DeepGEMM fp8 MQA logits: sm90/100/120 code only)",
]
_MISSING_E4M3 = ["fwht128_quant_fp8 (Triton e4m3, which 8.0/8.6 cannot compile)"]
_HOW = ["CPU: start-up refuses it on sm80/86/89 naming what is missing (tests/engine:model_checks_test)"]
_WHY = "no sm8x route for its sparse-MLA layers and indexer yet"

FAMILY = {
    "name": "glm5_next",
    "model": "GLM-5.3-Flash",
    "architecture": "Glm5NextForCausalLM",
    "formats": {
        "BF16": {
            "quantization": None,
            "tiny": None,
            "sm": {
                "sm80": support.status("wip", _WHY, missing=_MISSING_ALL + _MISSING_E4M3, how=_HOW),
                "sm86": support.status("wip", _WHY, missing=_MISSING_ALL + _MISSING_E4M3, how=_HOW),
                "sm89": support.status("wip", _WHY, missing=_MISSING_ALL, how=_HOW),
            },
        },
    },
    "sm8x_flags": [],
    "checks": ["wip"],
    "on_wip": "refuse",
    "serve": {
        "model": "/path/to/GLM-5.3-Flash",
        "args": ["--tensor-parallel-size", "8", "--host", "0.0.0.0", "--port", "8000"],
        "env": {},
    },
}
