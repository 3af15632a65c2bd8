"""Writes the Triton cubins packed in one kernel .so to a folder (run in its own process: each .so
registers the vllm_backport op namespace, so only one may be loaded per process).

usage: dump_aot.py LIB.so OUT_DIR   -> OUT_DIR/<i>.cubin, OUT_DIR/index.json
"""

import ctypes
import json
import os
import sys

import torch  # noqa: F401  (the .so needs libtorch's symbols loaded first)


def main(lib_path, out_dir):
    lib = ctypes.CDLL(os.path.abspath(lib_path))
    lib.vllm_backport_triton_key.restype = ctypes.c_char_p
    lib.vllm_backport_triton_meta.restype = ctypes.c_char_p
    lib.vllm_backport_triton_cubin.restype = ctypes.c_void_p
    lib.vllm_backport_triton_cubin_size.restype = ctypes.c_size_t
    lib.vllm_backport_sm.restype = ctypes.c_char_p
    index = {"sm": lib.vllm_backport_sm().decode(), "entries": []}
    for i in range(lib.vllm_backport_triton_count()):
        data = ctypes.string_at(lib.vllm_backport_triton_cubin(i), lib.vllm_backport_triton_cubin_size(i))
        with open(os.path.join(out_dir, "%d.cubin" % i), "wb") as f:
            f.write(data)
        meta = json.loads(lib.vllm_backport_triton_meta(i))
        index["entries"].append({"key": lib.vllm_backport_triton_key(i).decode(), "shared": meta["shared"],
                                 "arch": meta["target"]["arch"]})
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(index, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
