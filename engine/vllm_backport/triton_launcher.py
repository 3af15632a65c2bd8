"""Triton's CUDA launcher module from the image, so that no C compiler runs at start-up.

Triton 3.7 builds one C module (`cuda_utils`, from triton/backends/nvidia/driver.c) with gcc the
first time a process launches a Triton kernel, packed cubins included. The images carry it built
ahead of time (images/oci/triton_launcher.py) in VLLM_BACKPORT_KERNELS_DIR/triton/, with the sha256
of the driver.c it came from. install() gives Triton a build function (its `knobs.build.impl`
hook) that returns that file when Triton asks for exactly that source, and runs Triton's own
build for anything else. Outside the images (no such folder) nothing changes.
"""

import hashlib
import os
import shutil
import sysconfig

KERNELS_DIR_ENV = "VLLM_BACKPORT_KERNELS_DIR"
NAME = "cuda_utils"


def prebuilt(kernels_dir=None):
    """(path of the prebuilt module, sha256 of its driver.c) in the image, or None."""
    folder = os.path.join(kernels_dir or os.environ.get(KERNELS_DIR_ENV, ""), "triton")
    so, digest = os.path.join(folder, NAME + ".so"), os.path.join(folder, NAME + ".c.sha256")
    if not (os.path.isfile(so) and os.path.isfile(digest)):
        return None
    with open(digest) as f:
        return so, f.read().strip()


def make_build(so, sha256):
    """A Triton build function: the prebuilt module for its own source, Triton's build otherwise."""
    from triton import knobs
    from triton.runtime import build as triton_build

    def build(name, src, srcdir, library_dirs, include_dirs, libraries):
        with open(src, "rb") as f:
            same = name == NAME and hashlib.sha256(f.read()).hexdigest() == sha256
        if same:
            dest = os.path.join(srcdir, name + sysconfig.get_config_var("EXT_SUFFIX"))
            shutil.copyfile(so, dest)
            return dest
        knobs.build.impl = None  # Triton's own compile for a source we do not carry
        try:
            return triton_build._build(name, src, srcdir, library_dirs, include_dirs, libraries, [])
        finally:
            knobs.build.impl = build

    build.prebuilt = so
    return build


def install(kernels_dir=None):
    """Hands the image's prebuilt launcher to Triton; returns the start-up line's items."""
    found = prebuilt(kernels_dir)
    if found is None:
        return []
    from triton import knobs

    if knobs.build.impl is not None:  # someone else's build function: leave it
        return []
    knobs.build.impl = make_build(*found)
    return ["Triton launcher built ahead of time"]
