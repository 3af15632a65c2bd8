"""Prints the model registry as JSON (packaged into the plugin wheel as model_registry.json)."""

import json
import sys

from models import registry


def main():
    sys.stdout.write(json.dumps(registry.as_json(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
