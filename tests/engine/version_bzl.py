"""The engine version engine/version.bzl sets: 0.32.0+backport.N."""

import re


def engine_version(version_bzl):
    text = version_bzl.read_text()
    upstream = re.search(r'VLLM_VERSION = "([^"]+)"', text).group(1)
    revision = re.search(r"BACKPORT_REVISION = (\d+)", text).group(1)
    return f"{upstream}+backport.{revision}"
