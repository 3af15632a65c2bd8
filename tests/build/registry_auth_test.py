"""The release job's auth file carries the CI secrets in the format the pusher reads."""

import os
import stat
import tempfile
import unittest
from unittest import mock

from tools.ci import registry_auth
from images.oci import auth

SECRETS = {"REGISTRY_REPOSITORY": "registry.example:5000/team/vllm-backport", "REGISTRY_USER": "ci",
           "REGISTRY_PASSWORD": "p:ss word"}


class RegistryAuthTest(unittest.TestCase):
    def test_the_pusher_finds_the_credentials_for_the_repository_host(self):
        path = os.path.join(tempfile.mkdtemp(), "auth.json")
        with mock.patch.dict(os.environ, SECRETS):
            registry_auth.main([path])
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        with mock.patch.dict(os.environ, {"REGISTRY_AUTH_FILE": path, "HOME": tempfile.mkdtemp()}):
            self.assertEqual(auth.credentials("registry.example:5000"), ("ci", "p:ss word"))
            self.assertIsNone(auth.credentials("other.example"))

    def test_missing_settings_are_named(self):
        path = os.path.join(tempfile.mkdtemp(), "auth.json")
        with mock.patch.dict(os.environ, {"REGISTRY_USER": "ci"}, clear=True):
            with self.assertRaises(SystemExit) as raised:
                registry_auth.main([path])
        self.assertIn("REGISTRY_REPOSITORY, REGISTRY_PASSWORD not set", str(raised.exception))
        self.assertFalse(os.path.exists(path))


if __name__ == "__main__":
    unittest.main()
