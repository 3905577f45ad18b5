#!/bin/sh
# Bazel workspace status: values stamped into binaries and image labels.
rev=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then rev="$rev-dirty"; fi
echo "STABLE_GIT_COMMIT $rev"
echo "STABLE_VERSION 0.1.0-$(git rev-parse --short HEAD 2>/dev/null || echo nogit)"
