"""The float32 reference of the composition check: transformers' DeepseekV4Attention, one layer,
stepped through a prompt and decode steps with its own caches (sliding window, compressor buffers,
indexer), or the same results read back from a file written where transformers has DeepSeek-V4.

Two hooks on the C4A layer's indexer: the scores it ranks (the indexer logits ours are checked
against) and, when `step(selection=...)` gives one, the top-k it hands the attention (so the
reference attends over exactly the compressed entries our indexer picked; its own pick is kept
for the overlap report).
"""

import torch

from kernels.testing import dsv4_composition_weights as cw

FORMAT = "dsv4-composition-reference-1"


def transformers_status():
    """(True, version) when transformers has DeepSeek-V4, else (False, why)."""
    try:
        import transformers
    except ImportError as e:
        return False, "transformers is not installed (%s)" % e
    try:
        from transformers.models.deepseek_v4 import modeling_deepseek_v4  # noqa: F401
    except ImportError as e:
        return False, ("transformers %s has no DeepseekV4 (%s); install transformers>=5.19 or pass a reference "
                       "file written with `python3 -m kernels.testing.dsv4_layer_composition --write-reference FILE`"
                       % (transformers.__version__, e))
    return True, transformers.__version__


class HfLayer:
    """One transformers DeepseekV4Attention of `kind`, float32 on the CPU, with its DynamicCache."""

    def __init__(self, shape, kind, weights):
        from transformers import DeepseekV4Config, DynamicCache
        from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m

        self.config = DeepseekV4Config(**shape.hf_config(kind))
        self.config._attn_implementation = "eager"
        self.attn = m.DeepseekV4Attention(self.config, 0).float().eval()
        self.attn.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
        self.rotary = m.DeepseekV4RotaryEmbedding(self.config)
        self.cache = DynamicCache(config=self.config)
        self.position = 0
        self._selection = None
        self.own_topk = self.scores = None
        if cw.KINDS[kind] == 4:
            indexer = self.attn.compressor.indexer
            pick, score = indexer.forward, indexer.scorer.forward

            def indexer_forward(*args, **kwargs):
                self.own_topk = pick(*args, **kwargs)
                if self._selection is None:
                    return self.own_topk
                chosen = torch.full_like(self.own_topk, -1)
                width = min(self._selection.shape[-1], chosen.shape[-1])
                chosen[..., :width] = self._selection[..., :width].to(chosen.dtype)
                return chosen

            def scorer_forward(*args, **kwargs):
                self.scores = score(*args, **kwargs)
                return self.scores

            indexer.forward, indexer.scorer.forward = indexer_forward, scorer_forward

    @torch.no_grad()
    def step(self, hidden, selection=None):
        """hidden float32 [requests, tokens, hidden] at the next positions. selection: int [requests,
        tokens, k] compressed-entry indices (-1 = none) the C4A attention uses instead of its own
        top-k. Returns the layer output [requests, tokens, hidden] float32."""
        from transformers.masking_utils import create_sliding_window_causal_mask

        reqs, tokens, _ = hidden.shape
        pos = (torch.arange(tokens) + self.position)[None].expand(reqs, -1)
        mask = create_sliding_window_causal_mask(config=self.config, inputs_embeds=hidden, attention_mask=None,
                                                 past_key_values=self.cache, position_ids=pos)
        emb = {t: self.rotary(hidden, position_ids=pos, layer_type=t) for t in ("main", "compress")}
        if selection is not None:
            # Entries whose count exceeds the reference's own width are impossible (both pick at
            # most min(index_topk, visible entries)); keep the check loud.
            if (selection >= 0).sum(-1).max() > self.config.index_topk:
                raise ValueError("a selection wider than index_topk")
        self._selection = selection
        try:
            out, _ = self.attn(hidden, emb, pos, mask, past_key_values=self.cache)
        finally:
            self._selection = None
        self.position += tokens
        return out


def save(path, shape, runs):
    """runs: {kind: {"weights", "hidden", "prompt", "outputs": [per step], "topk": [per step or None],
    "scores": [per step or None]}} as computed by a reference without our selection."""
    import dataclasses

    torch.save({"format": FORMAT, "shape": dataclasses.asdict(shape), "runs": runs}, path)


def load(path):
    """(Shape, runs) of a file written by save()."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if blob.get("format") != FORMAT:
        raise ValueError("%s is not a DeepSeek-V4 composition reference (%s)" % (path, FORMAT))
    return cw.Shape(**blob["shape"]), blob["runs"]
