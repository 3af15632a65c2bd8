"""Registry credentials come from the standard auth files, matched by host, in the documented order."""

import base64
import json
import os
import sys
import tempfile
import unittest

from images.oci import auth


def write(path, auths):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"auths": {host: {"auth": base64.b64encode(cred.encode()).decode()}
                             for host, cred in auths.items()}}, f)


class AuthTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.saved = dict(os.environ)
        for key in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_CONFIG"):
            os.environ.pop(key, None)
        os.environ["HOME"] = self.tmp

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved)

    def test_docker_config_with_scheme_and_path_keys(self):
        write(os.path.join(self.tmp, ".docker", "config.json"),
              {"https" + "://reg.internal:5000/v1/": "alice:s3cret"})
        self.assertEqual(auth.credentials("reg.internal:5000"), ("alice", "s3cret"))
        self.assertIsNone(auth.credentials("other.internal"))

    def test_containers_auth_file_wins_over_docker(self):
        write(os.path.join(self.tmp, ".docker", "config.json"), {"reg.internal": "docker:one"})
        write(os.path.join(self.tmp, ".config", "containers", "auth.json"), {"reg.internal": "podman:two"})
        self.assertEqual(auth.credentials("reg.internal"), ("podman", "two"))
        os.environ["REGISTRY_AUTH_FILE"] = os.path.join(self.tmp, "explicit.json")
        write(os.environ["REGISTRY_AUTH_FILE"], {"reg.internal": "explicit:three"})
        self.assertEqual(auth.credentials("reg.internal"), ("explicit", "three"))

    def test_no_files_no_credentials(self):
        self.assertIsNone(auth.credentials("reg.internal"))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
