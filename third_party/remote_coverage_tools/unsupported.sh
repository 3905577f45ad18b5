#!/bin/sh
echo "bazel coverage is not supported with rules_go 0.34 and Go 1.26; use go test -cover" >&2
exit 1
