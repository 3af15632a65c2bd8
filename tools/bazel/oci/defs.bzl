"""OCI images without a Docker daemon: deterministic layers, image assembly, publishing.

oci_layer (rule): one gzip layer tar from .deb files, wheels and plain files (images/oci/layer.py).
oci_image (rule): SBOM layer + config + manifest over oci_layer targets (images/oci/image.py).
oci_push (rule): a `bazel run` target writing an OCI layout under dist/, or pushing to any registry
  with `-- --repository HOST/NAME` (images/oci/push.py).
"""

load("//tools/bazel/oci/private:rules.bzl", _OciImageInfo = "OciImageInfo", _OciLayerInfo = "OciLayerInfo", _oci_image = "oci_image", _oci_layer = "oci_layer", _oci_push = "oci_push")

OciImageInfo = _OciImageInfo
OciLayerInfo = _OciLayerInfo
oci_image = _oci_image
oci_layer = _oci_layer
oci_push = _oci_push
