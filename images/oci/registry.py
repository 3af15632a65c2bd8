"""A small client for the OCI distribution API: blob HEAD/upload, manifest PUT/GET, token auth.

Only the standard library. Uploads skip blobs the registry already has (HEAD), send small blobs in
one PUT and big ones in PATCH chunks; a dropped connection during a chunked upload asks the
registry how much it kept (GET on the upload session) and continues from there.
"""

import base64
import http.client
import json
import os
import socket
import ssl
import urllib.parse

from images.oci import auth

MANIFEST_TYPES = ",".join([
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])
_RETRIES = 3


class RegistryError(Exception):
    pass


def is_local(host):
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0][1:]
    return name in ("localhost", "127.0.0.1", "::1")


class Registry:
    """One repository (HOST/NAME) on one registry."""

    def __init__(self, host, name, insecure=None, chunk_size=64 << 20):
        self.host, self.name = host, name
        self.scheme = "http" if (is_local(host) if insecure is None else insecure) else "https"
        self.chunk_size = chunk_size
        self.token = None
        self.credentials = auth.credentials(host)
        self.stats = {"uploaded_blobs": 0, "uploaded_bytes": 0, "skipped_blobs": 0}

    # -- transport -----------------------------------------------------------------------------
    def _connection(self, netloc):
        if self.scheme == "https":
            return http.client.HTTPSConnection(netloc, timeout=300, context=ssl.create_default_context())
        return http.client.HTTPConnection(netloc, timeout=300)

    def _split(self, target):
        """Absolute or relative Location -> (netloc, path?query)."""
        parts = urllib.parse.urlsplit(target)
        netloc = parts.netloc or self.host
        path = parts.path + ("?" + parts.query if parts.query else "")
        return netloc, path

    def request(self, method, target, body=None, headers=None, ok=(200,)):
        headers = dict(headers or {})
        for attempt in (1, 2):
            if self.token:
                headers["Authorization"] = self.token
            netloc, path = self._split(target)
            conn = self._connection(netloc)
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read() if method != "HEAD" else b""
            except (ConnectionRefusedError, socket.gaierror) as error:
                raise RegistryError(
                    f"registry {self.host} refused the connection ({error}). Is it running and is the "
                    f"address right? Re-run the same command once it is up: blobs already uploaded are "
                    f"skipped.") from None
            except (ConnectionError, socket.timeout, http.client.HTTPException, OSError) as error:
                raise RegistryError(
                    f"the connection to registry {self.host} dropped during {method} {path.split('?')[0]} "
                    f"({error.__class__.__name__}: {error}). Re-run the same command to resume: blobs "
                    f"already uploaded are skipped.") from None
            finally:
                conn.close()
            if response.status == 401 and attempt == 1 and self._authenticate(response):
                if hasattr(body, "seek"):
                    body.seek(0)
                continue
            break
        if response.status not in ok:
            raise RegistryError(self._explain(method, path, response, data))
        return response, data

    def _explain(self, method, path, response, data):
        detail = data.decode(errors="replace")[:500]
        if response.status in (401, 403):
            hint = (f"log in first (`docker login {self.host}` or `podman login {self.host}`); credentials "
                    f"are read from {', '.join(auth.auth_files())}")
        elif response.status == 404:
            hint = f"the repository {self.name} or the object does not exist on {self.host}"
        else:
            hint = "the registry refused the request; re-run to resume once it is fixed"
        return f"registry {self.host}: {method} {path.split('?')[0]} -> {response.status} {response.reason}: {detail}\n{hint}"

    def _authenticate(self, response):
        challenge = response.getheader("WWW-Authenticate", "")
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if not self.credentials:
                return False
            self.token = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            return True
        if scheme.lower() != "bearer":
            return False
        fields = dict(part.split("=", 1) for part in _split_params(params))
        fields = {k: v.strip('"') for k, v in fields.items()}
        realm = fields.pop("realm", None)
        if not realm:
            return False
        fields.setdefault("scope", f"repository:{self.name}:pull,push")
        query = urllib.parse.urlencode({k: fields[k] for k in ("service", "scope") if k in fields})
        parts = urllib.parse.urlsplit(realm)
        conn = (http.client.HTTPSConnection(parts.netloc, timeout=60) if parts.scheme == "https"
                else http.client.HTTPConnection(parts.netloc, timeout=60))
        headers = {}
        if self.credentials:
            headers["Authorization"] = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
        try:
            conn.request("GET", parts.path + "?" + query, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
        finally:
            conn.close()
        if reply.status != 200:
            return False
        token = json.loads(data)
        self.token = "Bearer " + (token.get("token") or token.get("access_token"))
        return True

    # -- blobs ---------------------------------------------------------------------------------
    def has_blob(self, digest):
        response, _ = self.request("HEAD", f"/v2/{self.name}/blobs/{digest}", ok=(200, 404))
        return response.status == 200

    def upload_blob(self, digest, path):
        if self.has_blob(digest):
            self.stats["skipped_blobs"] += 1
            return False
        size = os.path.getsize(path)
        response, _ = self.request("POST", f"/v2/{self.name}/blobs/uploads/", ok=(202,),
                                   headers={"Content-Length": "0"})
        location = response.getheader("Location")
        if size <= self.chunk_size:
            with open(path, "rb") as f:
                self.request("PUT", _with_digest(location, digest), body=f.read(), ok=(201,),
                             headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})
        else:
            location = self._upload_chunks(location, path, size)
            self.request("PUT", _with_digest(location, digest), body=b"", ok=(201,),
                         headers={"Content-Length": "0"})
        self.stats["uploaded_blobs"] += 1
        self.stats["uploaded_bytes"] += size
        return True

    def _upload_chunks(self, location, path, size):
        offset, failures = 0, 0
        with open(path, "rb") as f:
            while offset < size:
                f.seek(offset)
                chunk = f.read(self.chunk_size)
                end = offset + len(chunk) - 1
                try:
                    response, _ = self.request(
                        "PATCH", location, body=chunk, ok=(202,),
                        headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(chunk)),
                                 "Content-Range": f"{offset}-{end}"})
                except RegistryError:
                    failures += 1
                    if failures > _RETRIES:
                        raise
                    offset = self._uploaded_so_far(location)
                    continue
                location = response.getheader("Location") or location
                offset = end + 1
        return location

    def _uploaded_so_far(self, location):
        response, _ = self.request("GET", location, ok=(204,))
        ranged = response.getheader("Range", "0-0")
        return int(ranged.split("-")[-1]) + 1 if ranged != "0-0" else 0

    def get_blob(self, digest):
        return self.request("GET", f"/v2/{self.name}/blobs/{digest}", headers={}, ok=(200,))[1]

    # -- manifests -----------------------------------------------------------------------------
    def put_manifest(self, reference, data, media_type):
        response, _ = self.request("PUT", f"/v2/{self.name}/manifests/{reference}", body=data, ok=(201,),
                                   headers={"Content-Type": media_type, "Content-Length": str(len(data))})
        return response.getheader("Docker-Content-Digest")

    def get_manifest(self, reference):
        response, data = self.request("GET", f"/v2/{self.name}/manifests/{reference}",
                                      headers={"Accept": MANIFEST_TYPES})
        return response.getheader("Docker-Content-Digest"), data


def _with_digest(location, digest):
    joiner = "&" if "?" in location else "?"
    return f"{location}{joiner}digest={urllib.parse.quote(digest)}"


def _split_params(params):
    """Splits `a="x,y",b=z` on commas outside quotes."""
    out, current, quoted = [], "", False
    for char in params:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            out.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        out.append(current.strip())
    return [p for p in out if "=" in p]
