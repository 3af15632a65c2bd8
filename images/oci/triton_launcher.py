"""Triton's CUDA launcher module (`cuda_utils`), compiled ahead of time for the image.

Triton 3.7 compiles one small C module, its CUDA driver glue (triton/backends/nvidia/driver.c), with
a C compiler the first time a process launches any Triton kernel, the packed cubins of the kernel
library included. This builds the same module with the same command Triton would run
(triton/runtime/build.py: -O3 -shared -fPIC -Wno-psabi, -l:libcuda.so.1, Triton's CUDA headers,
Python.h) against the image's pinned libpython3.11-dev headers, linking a stub libcuda.so.1 that
only names the library (the driver's own comes in with the GPU at run time), and writes the sha256
of the driver.c it was built from beside it. The plugin (vllm_backport/triton_launcher.py) hands it
to Triton for exactly that source, so no compiler runs at start-up.

  python3 -m images.oci.triton_launcher --triton WHEEL_OR_PACKAGE_DIR --deb libpython3.11-dev_*.deb \\
      --out cuda_utils.so --sha256-out cuda_utils.c.sha256
"""

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

DRIVER = "triton/backends/nvidia/driver.c"
INCLUDE = "triton/backends/nvidia/include/"


def triton_sources(triton, dest):
    """driver.c and Triton's CUDA headers from a triton wheel or an installed triton package."""
    if zipfile.is_zipfile(triton):
        with zipfile.ZipFile(triton) as wheel:
            for name in wheel.namelist():
                if name == DRIVER or (name.startswith(INCLUDE) and not name.endswith("/")):
                    wheel.extract(name, dest)
        root = dest
    else:
        root = os.path.dirname(os.path.abspath(triton.rstrip("/")))  # the folder holding triton/
    driver = os.path.join(root, DRIVER)
    if not os.path.isfile(driver):
        raise SystemExit(f"triton_launcher: {triton} has no {DRIVER}; is it Triton 3.x?")
    return driver, os.path.join(root, INCLUDE)


def python_includes(deb, dest):
    """Python.h and pyconfig.h from the pinned libpython3.11-dev package."""
    subprocess.run(["dpkg-deb", "-x", deb, dest], check=True)
    found = glob.glob(os.path.join(dest, "usr/include/python3.*/Python.h"))
    if len(found) != 1:
        raise SystemExit(f"triton_launcher: {deb} holds no single usr/include/python3.*/Python.h")
    return [os.path.dirname(found[0]), os.path.join(dest, "usr/include")]


def stub_libcuda(cc, dest):
    """An empty libcuda.so.1: the module then records the driver's library as a dependency."""
    os.makedirs(dest)
    src = os.path.join(dest, "stub.c")
    with open(src, "w") as f:
        f.write("void vllm_backport_libcuda_stub(void) {}\n")
    subprocess.run([cc, src, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                    os.path.join(dest, "libcuda.so.1")], check=True)
    return dest


def build(triton, deb, out, sha256_out, cc):
    with tempfile.TemporaryDirectory() as tmp:
        driver, include = triton_sources(triton, os.path.join(tmp, "triton"))
        py_include = python_includes(deb, os.path.join(tmp, "deb"))
        stub = stub_libcuda(cc, os.path.join(tmp, "stub"))
        srcdir = os.path.join(tmp, "src")
        os.makedirs(srcdir)
        src = os.path.join(srcdir, "cuda_utils.c")
        shutil.copyfile(driver, src)
        so = os.path.join(srcdir, "cuda_utils.so")
        # triton/runtime/build.py's command, include order as there: Triton's, srcdir, Python's.
        # The stub defines none of the cu* functions, so the linker would drop it (Debian's gcc
        # links --as-needed): keep libcuda.so.1 as a dependency, as the real library would be.
        # -ffile-prefix-map: Python's headers put their paths (__FILE__ of inline asserts) into the
        # module; without it they carry this build's temporary folder, and two images differ.
        cmd = [cc, src, "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", so,
               "-Wl,--no-as-needed", "-l:libcuda.so.1", "-L" + stub,
               "-I" + include, "-I" + srcdir] + ["-I" + d for d in py_include] + [f"-ffile-prefix-map={tmp}=/build"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        shutil.copyfile(so, out)
        with open(driver, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    with open(sha256_out, "w") as f:
        f.write(digest + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton", required=True, help="the triton wheel, or an installed triton package folder")
    parser.add_argument("--deb", required=True, help="libpython3.11-dev .deb of the image's Debian lock")
    parser.add_argument("--out", required=True)
    parser.add_argument("--sha256-out", required=True)
    parser.add_argument("--cc", default=os.environ.get("CC") or shutil.which("gcc") or "gcc")
    args = parser.parse_args(argv)
    build(args.triton, args.deb, args.out, args.sha256_out, args.cc)


if __name__ == "__main__":
    sys.exit(main())
