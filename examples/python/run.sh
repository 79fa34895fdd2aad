#!/usr/bin/env bash
# Runs the Python client example for a human (make python-example): it
# generates the Python message classes with protoc into a temporary
# directory, starts the example silo (examples/python/silo) with a TLS
# gateway that requires a bearer token, and calls its Greeter grain with
# client.py: refused without the token, greeted twice with it, and
# refused with a decoded google.rpc.BadRequest for an empty name. Then it
# stops the silo and removes what it made.
#
# It needs Go and Debian's packages (README.md in this directory):
#
#   apt-get install python3-grpcio python3-protobuf protobuf-compiler \
#     libprotobuf-dev golang-github-gogo-googleapis-dev
#
# The environment may change where things are:
#   GO                        the go command (default go)
#   GRANARY_PYTHON            a python3 with grpc and google.protobuf
#                             (default /usr/bin/python3, Debian's)
#   GRANARY_PROTOC            protoc (default protoc)
#   GRANARY_GOOGLE_RPC_PROTO  the include directory of google/rpc/*.proto
#                             (default Debian's, of gogo's googleapis)
#   PYTHON_EXAMPLE_ADDR       the gateway's address (default 127.0.0.1:30100)
set -euo pipefail
cd "$(dirname "$0")/../.."

GO=${GO:-go}
PYTHON=${GRANARY_PYTHON:-/usr/bin/python3}
PROTOC=${GRANARY_PROTOC:-protoc}
GOOGLE_RPC=${GRANARY_GOOGLE_RPC_PROTO:-/usr/share/gocode/src/github.com/gogo/googleapis}
ADDR=${PYTHON_EXAMPLE_ADDR:-127.0.0.1:30100}
PACKAGES="python3-grpcio python3-protobuf protobuf-compiler libprotobuf-dev golang-github-gogo-googleapis-dev"

die() { echo "python-example: $*" >&2; exit 1; }

"$PYTHON" -c 'import grpc, google.protobuf' 2>/dev/null ||
	die "$PYTHON cannot import grpc and google.protobuf; apt-get install $PACKAGES (or set GRANARY_PYTHON)"
command -v "$PROTOC" >/dev/null || die "no $PROTOC; apt-get install $PACKAGES"
[ -f "$GOOGLE_RPC/google/rpc/status.proto" ] ||
	die "no $GOOGLE_RPC/google/rpc/status.proto; apt-get install $PACKAGES (or set GRANARY_GOOGLE_RPC_PROTO)"

tmp=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "# protoc --python_out: the message classes of proto/ and google/rpc (stubs.sh)" >&2
GRANARY_PROTOC="$PROTOC" GRANARY_GOOGLE_RPC_PROTO="$GOOGLE_RPC" examples/python/stubs.sh "$tmp/pb" 2>&1 ||
	die "protoc failed"
echo "# building the silo and granaryctl, making a CA and the gateway's certificate" >&2
"$GO" build -o "$tmp/silo" ./examples/python/silo
"$GO" build -o "$tmp/granaryctl" ./cmd/granaryctl
"$tmp/granaryctl" certs --out "$tmp/certs" --silo python-example --localhost >/dev/null
printf 'python-example-token python\n' >"$tmp/tokens"
printf 'python-example-token\n' >"$tmp/token"

echo "# starting the silo, its gateway on $ADDR (its log: warnings and errors)" >&2
GRANARY_NAME=python-example GRANARY_GATEWAY_LISTEN="$ADDR" GRANARY_ADMIN_LISTEN= \
	GRANARY_STORAGE_PROVIDER=memory GRANARY_LOG_FORMAT=console GRANARY_LOG_LEVEL=warn \
	GRANARY_GATEWAY_TLS_MODE=tls GRANARY_GATEWAY_TLS_CERT_FILE="$tmp/certs/python-example.crt" \
	GRANARY_GATEWAY_TLS_KEY_FILE="$tmp/certs/python-example.key" \
	GRANARY_GATEWAY_AUTH_TOKEN_FILE="$tmp/tokens" "$tmp/silo" &
pid=$!

# client runs client.py against the silo, echoing its arguments; a call
# that fails does not end the script.
client() {
	local a line="\$ client.py"
	for a in "$@"; do
		if [[ $a =~ ^[A-Za-z0-9_./:=-]+$ ]]; then line+=" $a"; else line+=" '$a'"; fi
	done
	printf '\n%s\n' "$line"
	"$PYTHON" examples/python/client.py --pb "$tmp/pb" --target "$ADDR" --ca "$tmp/certs/ca.crt" "$@" ||
		echo "(exit $?)"
}

# The first call waits for the gateway, which the silo opens once started.
client --wait --key alice hello.Greeter/SayHello '{"name": "Bob"}'
kill -0 "$pid" 2>/dev/null || die "the silo exited: is $ADDR taken? (set PYTHON_EXAMPLE_ADDR)"
client --token-file "$tmp/token" --key alice hello.Greeter/SayHello '{"name": "Bob"}'
client --token-file "$tmp/token" --key alice hello.Greeter/SayHello '{"name": "Carol"}'
client --token-file "$tmp/token" --key alice hello.Greeter/Greetings
client --token-file "$tmp/token" --key alice hello.Greeter/SayHello '{"name": ""}'
