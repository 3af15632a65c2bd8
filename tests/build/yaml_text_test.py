"""yaml_text writes YAML that a YAML reader turns back into the same data, the same way every time."""

import unittest

import yaml

from tools.ci import yaml_text

TRICKY = ["on", "Yes", "off", "null", "~", "1.0", "42", "*", "-", "a: b", "a:b", "x #y", "x#y", "# c", "[a]",
          "{a}", "@v", "'q'", '"q"', "it's", "", " lead", "trail ", "end:", "$(cat VERSION)", "${{ vars.X }}",
          "back\\slash", "tab\there", "üñí"]


class YamlTextTest(unittest.TestCase):
    def assertRoundTrip(self, data):
        text = yaml_text.dump(data)
        self.assertEqual(yaml.safe_load(text), data, text)
        self.assertEqual(yaml_text.dump(data), text)

    def test_tricky_scalars(self):
        self.assertRoundTrip({"values": TRICKY, "as_keys": {value: value for value in TRICKY}})

    def test_nesting_blocks_and_empties(self):
        self.assertRoundTrip({
            "on": {"push": {"branches": ["**"]}, "pull_request": {}},
            "jobs": [{"name": "a", "steps": [{"run": "one\ntwo\n"}, {"run": "no newline\nat end"}]}, [], {}],
            "flags": [True, False, 3],
        })

    def test_keys_keep_their_order(self):
        self.assertEqual(yaml_text.dump({"b": 1, "a": 2}), "b: 1\na: 2\n")

    def test_blocks_cannot_start_with_blank_space(self):
        with self.assertRaises(ValueError):
            yaml_text.dump({"run": "  indented\nsecond\n"})


if __name__ == "__main__":
    unittest.main()
