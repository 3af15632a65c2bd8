"""Writes a registry auth file from CI secrets, for the release job's push targets.

  REGISTRY_REPOSITORY=HOST/NAME REGISTRY_USER=... REGISTRY_PASSWORD=... registry_auth.py FILE

FILE gets {"auths": {HOST: {"auth": base64(user:password)}}}, readable by its owner only: the
format `docker login` writes, which the pusher reads through $REGISTRY_AUTH_FILE
(images/oci/auth.py). The values come from the CI service's variables and secrets, never from
the repository.
"""

import base64
import json
import os
import sys

NEEDED = ("REGISTRY_REPOSITORY", "REGISTRY_USER", "REGISTRY_PASSWORD")


def auth_config(repository, user, password):
    host = repository.split("/", 1)[0]
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"auths": {host: {"auth": token}}}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: registry_auth.py FILE")
    missing = [name for name in NEEDED if not os.environ.get(name)]
    if missing:
        sys.exit(f"registry_auth: {', '.join(missing)} not set; define the CI variable REGISTRY_REPOSITORY "
                 f"(HOST/NAME) and the secrets REGISTRY_USER and REGISTRY_PASSWORD")
    config = auth_config(*(os.environ[name] for name in NEEDED))
    descriptor = os.open(argv[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump(config, out)


if __name__ == "__main__":
    main()
