#!/usr/bin/env bash
# Bazel's --workspace_status_command: the commit images are labelled with
# (org.opencontainers.image.revision, .source). Prints "unknown" outside a git checkout.
echo "STABLE_GIT_REVISION $(git rev-parse HEAD 2>/dev/null || echo unknown)"
# The fetch address of origin, without any user:password@ part.
remote="$(git config --get remote.origin.url 2>/dev/null || true)"
echo "STABLE_GIT_REMOTE $(printf '%s' "$remote" | sed -E 's#//[^/@]*@#//#')"
