"""Runs `vllm serve` the way a container would see its world, for setup_checks_e2e_test.py.

Meant to be started as root under `unshare --net --mount --propagation private`: mounts made here
vanish with the namespace, and the network has only a loopback, so nothing can be fetched. It
mounts what it is told, brings the loopback up, then either runs `vllm ARGS` to completion or
serves and sends one completion, and prints a JSON result on its last line.

  isolated_serve.py --plugin-wheel W [--shm SIZE] [--ro-hf-home DIR] [--serve MODEL] -- ARGS...
"""

import argparse
import fcntl
import json
import os
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vllm_server import VllmServer, run_vllm  # noqa: E402

SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40


def loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))


def mount(*args):
    subprocess.run(["mount", *args], check=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plugin-wheel", required=True)
    parser.add_argument("--shm", help="tmpfs size for a fresh /dev/shm, e.g. 64m")
    parser.add_argument("--ro-hf-home", help="a folder mounted read-only on itself and used as HF_HOME")
    parser.add_argument("--serve", help="serve this model and send one completion instead of running ARGS")
    parser.add_argument("args", nargs="*")
    opts = parser.parse_args()
    loopback_up()
    if opts.shm:
        mount("-t", "tmpfs", "-o", f"size={opts.shm}", "shm", "/dev/shm")
    env = {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}  # as in the image: nothing set
    if opts.ro_hf_home:
        mount("--bind", opts.ro_hf_home, opts.ro_hf_home)
        mount("-o", "remount,bind,ro", opts.ro_hf_home)
        env["HF_HOME"] = opts.ro_hf_home
    if opts.serve:
        server = VllmServer(opts.serve, opts.args, plugin_wheel=opts.plugin_wheel, env=env)
        try:
            server.start()
            status, body = server.post("/v1/completions", {"model": opts.serve, "prompt": "hello",
                                                           "max_tokens": 4, "temperature": 0})
            result = {"status": status, "served": status == 200, "log": server.log_tail(20),
                      "offline_note": "serving it from there without asking the hub" in server.log_text()}
        except (RuntimeError, TimeoutError) as e:
            result = {"status": None, "served": False, "log": str(e)[-6000:]}
        finally:
            server.stop()
    else:
        code, out = run_vllm(opts.args, opts.plugin_wheel, env=env)
        result = {"code": code, "output": out[-8000:]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
