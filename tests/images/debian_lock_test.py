"""tools/pins/debian.lock is well formed and agrees with debian.in and toolchains.json."""

import json
import re
import sys
import unittest

IN, LOCK, TOOLCHAINS = sys.argv[1:4]


def roots():
    groups, current = {}, None
    for line in open(IN):
        line = line.split("#", 1)[0].strip()
        if line.startswith("["):
            current = line.strip("[]")
            groups[current] = []
        elif line:
            groups[current].append(line)
    return groups


def lock():
    rows = {}
    for line in open(LOCK):
        if line.strip() and not line.startswith("#"):
            fields = line.split()
            if len(fields) != 5:
                raise AssertionError(f"bad lock line {line!r}")
            rows[fields[0]] = fields[1:]
    return rows


class DebianLockTest(unittest.TestCase):
    def test_every_root_is_locked_in_its_group_or_an_earlier_one(self):
        rows, order = lock(), list(roots())
        for group, packages in roots().items():
            for name in packages:
                self.assertIn(name, rows, f"root {name} missing from the lock")
                self.assertLessEqual(order.index(rows[name][3]), order.index(group))

    def test_fields(self):
        for name, (version, arch, sha, group) in lock().items():
            self.assertRegex(sha, r"^[0-9a-f]{64}$")
            self.assertIn(arch, ("amd64", "all"))
            self.assertIn(group, roots())

    def test_python_matches_toolchains_pin(self):
        pin = json.load(open(TOOLCHAINS))["python"]
        version, _, sha, _ = lock()[pin["debian_package"]]
        self.assertEqual((version, sha), (pin["debian_version"], pin["sha256"]))

    def test_no_dpkg_in_the_image(self):
        self.assertNotIn("dpkg", lock())
        self.assertTrue(re.match(r"^\d", lock()["libc6"][0]))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
