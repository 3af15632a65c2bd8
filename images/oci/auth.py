"""Registry credentials from the standard Docker and containers auth files (never from the repo).

Looked up in this order, first match wins:
  $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json, ~/.config/containers/auth.json,
  $DOCKER_CONFIG/config.json, ~/.docker/config.json
Each may hold "auths": {HOST: {"auth": base64(user:password)}} or name a credential helper
("credHelpers": {HOST: NAME} or "credsStore": NAME), run as `docker-credential-NAME get`.
"""

import base64
import json
import os
import subprocess


def auth_files():
    home = os.path.expanduser("~")
    files = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        files.append(os.environ["REGISTRY_AUTH_FILE"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        files.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "containers", "auth.json"))
    files.append(os.path.join(home, ".config", "containers", "auth.json"))
    if os.environ.get("DOCKER_CONFIG"):
        files.append(os.path.join(os.environ["DOCKER_CONFIG"], "config.json"))
    files.append(os.path.join(home, ".docker", "config.json"))
    return files


def _helper(name, host):
    try:
        done = subprocess.run([f"docker-credential-{name}", "get"], input=host, capture_output=True,
                              text=True, timeout=60)
    except FileNotFoundError:
        return None
    if done.returncode:
        return None
    secret = json.loads(done.stdout)
    return secret.get("Username", ""), secret.get("Secret", "")


def _host_of(key):
    """An auths key may be HOST, HOST/PATH or SCHEME://HOST/PATH; compare by HOST only."""
    return key.split("://", 1)[-1].split("/", 1)[0]


def credentials(host):
    """(user, password) for the registry host (as `docker login HOST` stored it), or None."""
    for path in auth_files():
        try:
            config = json.load(open(path))
        except (OSError, ValueError):
            continue
        auths = {_host_of(key): value for key, value in config.get("auths", {}).items()}
        helpers = {_host_of(key): value for key, value in config.get("credHelpers", {}).items()}
        entry = auths.get(host)
        if entry and entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            return user, password
        if helpers.get(host):
            found = _helper(helpers[host], host)
            if found:
                return found
        if config.get("credsStore"):
            found = _helper(config["credsStore"], host)
            if found:
                return found
    return None
