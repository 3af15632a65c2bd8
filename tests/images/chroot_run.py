"""Runs a command of an unpacked image as its user, the way a container engine would, with no daemon.

Each run is its own `unshare --net --mount` (root needed): /dev and /proc are mounted into the root
file system for that run only, the network has nothing but a loopback that is down (a start-up path
that tries to fetch fails), and optional mounts stand in for `docker run` flags: a tmpfs of a given
size on /dev/shm (`--shm-size`, Docker's default is 64 MB) and a host folder on the image's
HF_HOME (`-v ~/.cache/huggingface:/root/.cache/huggingface[:ro]`). The command gets exactly the
image's Env, User and WorkingDir (the image has no shell: its own Python is the launcher).
"""

import os
import shutil
import subprocess

# The image's Python changes to WorkingDir, then execs the command (PATH from the image's Env).
LAUNCH = "import os, sys; os.chdir(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"

_SCRIPT = r"""
set -e
root=$1 shm=$2 hf=$3 hf_mode=$4 hf_home=$5; shift 5
mount --bind /dev "$root/dev"
mount -t proc proc "$root/proc"
[ -z "$shm" ] || mount -t tmpfs -o "size=$shm" shm "$root/dev/shm"
if [ -n "$hf" ]; then
  mount --bind "$hf" "$root$hf_home"
  [ "$hf_mode" != ro ] || mount -o remount,bind,ro "$root$hf_home"
fi
exec "$@"
"""


def tool(name):
    found = shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin:/usr/bin:/bin")
    if not found:
        raise FileNotFoundError(f"{name} is needed on the host (util-linux / coreutils)")
    return found


def image_env(config):
    return dict(item.split("=", 1) for item in config.get("Env", []))


def run(root, config, argv, entrypoint=True, shm=None, hf_dir=None, hf_read_only=False, timeout=600):
    """(exit code, stdout + stderr) of the image's entrypoint + argv (or argv alone) as its user."""
    env = image_env(config)
    command = (list(config.get("Entrypoint") or []) if entrypoint else []) + list(argv)
    for path in ("dev", "proc"):
        os.makedirs(os.path.join(root, path), exist_ok=True)
    chroot = [tool("chroot"), "--userspec=" + config.get("User", "0:0"), root, "/usr/bin/python3", "-c", LAUNCH,
              config.get("WorkingDir") or "/", *command]
    cmd = [tool("unshare"), "--net", "--mount", "--propagation", "private", tool("sh"), "-c", _SCRIPT, "sh",
           root, shm or "", hf_dir or "", "ro" if hf_read_only else "rw", env.get("HF_HOME", ""),
           tool("env"), "-i", *[f"{k}={v}" for k, v in env.items()], *chroot]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr
