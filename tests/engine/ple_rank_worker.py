"""One tensor-parallel rank holding a Qwen4Exp PLE n-gram table, as vLLM places it: run by
ple_host_memory_test.py as `python ple_rank_worker.py MODEL_DIR WORLD RANK PORT BASE`. Prints one JSON
line: the rows and bytes of this rank's table and the growth of its resident memory once the table's
pages are written, then the rows it loaded from the checkpoint-layout shards."""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "models"))


def resident_bytes():
    with open("/proc/self/statm") as f:
        import os

        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(model, world, rank, port, base):
    import torch

    import gpu_path
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    config = gpu_path.engine_config(model, tensor_parallel_size=world, engram_config={"cpu_offload": False},
                                    hf_overrides={"ngram_vocab_size_base": base})
    with set_current_vllm_config(config):
        init_distributed_environment(world_size=world, rank=rank, local_rank=rank, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{port}")
        initialize_model_parallel(world, 1)
        import vllm.models.qwen4_exp.nvidia.model  # noqa: F401 (the package's import order)
        from vllm.models.qwen4_exp.nvidia.ngram_embedding import Qwen4ExpNGramEmbedding

        text = config.model_config.hf_text_config
        prefix = "model.layers.0.ple.ple_embedding"
        embedding = Qwen4ExpNGramEmbedding(text, text.ple_embed_dim, 0, 64, data_parallel_rank=0, prefix=prefix,
                                           params_dtype=torch.bfloat16)
        table = embedding.ngram_embedding
        before = resident_bytes()
        table.weight.data.fill_(0)  # fault in every page of this rank's table
        grown = resident_bytes() - before
        # The checkpoint's shards, each row holding its global row index, through vLLM's shard loader.
        parts, rows = text.split_ngram_parts, table.org_vocab_size
        per_part = -(-rows // parts)
        shards = []
        for k in range(parts):
            start = k * per_part
            count = max(0, min(per_part, rows - start))
            values = torch.arange(start, start + count, dtype=torch.float32)[:, None].expand(count, table.embedding_dim)
            shards.append((f"ngram_embedding.shard_{k}.weight", values.to(torch.bfloat16)))
        embedding.load_weights(shards)
        first, last = table.shard_indices.org_vocab_start_index, table.shard_indices.org_vocab_end_index
        local = table.weight.data[: last - first, 0].float()
        expected = torch.arange(first, last, dtype=torch.float32).to(torch.bfloat16).float()
        print(json.dumps({"rank": rank, "table_rows": rows, "rows": int(table.weight.shape[0]),
                          "bytes": table.weight.untyped_storage().nbytes(), "resident_growth": grown,
                          "first": first, "last": last, "loaded_own_rows": bool(torch.equal(local, expected))}))


if __name__ == "__main__":
    model, world, rank, port, base = sys.argv[1:6]
    main(model, int(world), int(rank), int(port), int(base))
