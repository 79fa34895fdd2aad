#!/usr/bin/env bash
# Generates the Python message classes that client.py loads: protoc
# --python_out of every .proto file under the repository's proto/ and of
# google/rpc/status.proto and error_details.proto, into OUT_DIR (made if
# missing). run.sh (make python-example) and python_test.go both run it, so
# the two cannot drift apart.
#
#   examples/python/stubs.sh OUT_DIR
#
# The environment may change where things are:
#   GRANARY_PROTOC            protoc (default protoc)
#   GRANARY_GOOGLE_RPC_PROTO  the include directory of google/rpc/*.proto
#                             (default Debian's, of gogo's googleapis)
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
PROTOC=${GRANARY_PROTOC:-protoc}
GOOGLE_RPC=${GRANARY_GOOGLE_RPC_PROTO:-/usr/share/gocode/src/github.com/gogo/googleapis}
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."

# shellcheck disable=SC2046 # one word per .proto file
"$PROTOC" -I proto -I "$GOOGLE_RPC" --python_out="$out" \
	$(cd proto && find . -name '*.proto' | sed 's|^\./||' | sort) \
	google/rpc/status.proto google/rpc/error_details.proto
