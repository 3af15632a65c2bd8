"""transformers' float32 model of a tiny checkpoint, quantised ones included: the reference the GPU
end-to-end test compares vLLM with (models/reference.py)."""

import json
import pathlib
import tempfile


def load(model_cls, checkpoint_dir, dequantise):
    """model_cls.from_pretrained in float32. A checkpoint with a quantization_config is first turned
    into the float32 weights it stands for by dequantise(state dict) (exactly, so the reference holds
    what vLLM serves): transformers' own loaders would requantise it or quantise modules the
    checkpoint keeps BF16."""
    import torch
    from safetensors.torch import load_file, save_file

    src = pathlib.Path(checkpoint_dir)
    config = json.loads((src / "config.json").read_text())
    if not config.pop("quantization_config", None):
        return model_cls.from_pretrained(str(src), dtype=torch.float32).eval()
    state = dequantise(load_file(str(src / "model.safetensors")))
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "config.json").write_text(json.dumps(config))
        # Integer tensors (the PLE n-gram hash multipliers, ~1e16) stay as written: float32 would round them.
        save_file({k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in state.items()},
                  str(pathlib.Path(tmp) / "model.safetensors"),
                  metadata={"format": "pt"})
        return model_cls.from_pretrained(tmp, dtype=torch.float32).eval()
