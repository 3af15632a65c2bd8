"""Every test starts with its own empty home folder (.bazelrc: HOME for tests is their TEST_TMPDIR).

vLLM keeps a model-info cache under ~/.cache/vllm, Triton its compiled kernels under ~/.triton, the
Hugging Face client its downloads under ~/.cache/huggingface: with a shared home, what one test
left behind changed what another ran (a cached model inspection skipped vLLM's registry subprocess
and hid a missing import path). This test holds the set-up every other test relies on.
"""

import os
import pathlib
import unittest


class TestHomeTest(unittest.TestCase):
    def test_home_is_this_tests_own_temporary_folder(self):
        home = os.environ.get("HOME")
        self.assertTrue(home, "HOME is unset in the test: Python would fall back to the account's real home")
        self.assertEqual(pathlib.Path(home).resolve(), pathlib.Path(os.environ["TEST_TMPDIR"]).resolve())
        self.assertEqual(pathlib.Path("~").expanduser().resolve(), pathlib.Path(home).resolve())

    def test_caches_under_home_start_empty(self):
        home = pathlib.Path(os.environ["HOME"])
        for cache in (".cache", ".triton", ".config"):
            self.assertFalse((home / cache).exists(), f"{home / cache} exists before the test wrote anything")
        self.assertNotIn("XDG_CACHE_HOME", os.environ, "XDG_CACHE_HOME would move caches out of the test's home")


if __name__ == "__main__":
    unittest.main()
