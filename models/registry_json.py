"""Prints the model registry as JSON (packaged into the plugin wheel as model_registry.json)."""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from models import registry  # noqa: E402


def main():
    sys.stdout.write(json.dumps(registry.as_json(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
