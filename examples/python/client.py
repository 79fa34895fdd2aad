#!/usr/bin/env python3
"""Calls a Granary grain through a silo's gateway, from Python.

The gateway serves each grain type as a plain gRPC service (package
silo/grpcapi), so this client needs no Granary code: only grpcio, the
protobuf runtime, and the message classes that protoc --python_out makes
from the grain's .proto file. It calls any method of any grain type by
name, with the messages as JSON:

    client.py --pb DIR --target 127.0.0.1:30000 --key alice \\
        hello.Greeter/SayHello '{"name": "Bob"}'

    client.py --pb DIR --target 127.0.0.1:30000 --ca ca.crt --token-file token \\
        --key alice hello.Greeter/SayHello '{"name": "Bob"}'

DIR holds the *_pb2.py modules that protoc generated from the repository's
proto/ directory and from google/rpc/status.proto and error_details.proto
(README.md shows the command). Every module under DIR is imported, so any
service they define can be called.

What goes with a call:

  - the grain key, as the request metadata "granary-key: KEY" (--key);
    grain types whose requests carry the key in a field need no --key;
  - a bearer token, as "authorization: Bearer TOKEN", when --token-file
    (or the environment variable GRANARY_TOKEN_FILE) names a file holding
    it: the token alone, or a silo's "TOKEN PRINCIPAL" lines, whose first
    is used, as granaryctl reads it. A gateway takes tokens only over TLS,
    so a token needs --ca, the CA certificate that the gateway's
    certificate chains to (the client refuses to send one in the clear).

A call that fails prints its gRPC code and message and, when the server
sent them, the google.rpc.Status details of the trailer
grpc-status-details-bin, each decoded by its type (google.rpc.BadRequest,
say) when a module under DIR defines it.

A method that streams its replies (a durable stream's events, through
granary.v1.StreamGateway/Subscribe) prints one line per reply as it
comes, until the stream ends, the deadline passes, or --count replies
came:

    client.py --pb DIR --target 127.0.0.1:30000 --count 10 \\
        granary.v1.StreamGateway/Subscribe '{"stream": "logged/greetings/Bob", "from": {"sequence": "1"}}'

Each event comes as a google.protobuf.Any of the stream's own type, shown
as JSON of that type when a module under DIR defines it.

It prints one line per call: "METHOD: OK REPLY" or "METHOD: CODE: MESSAGE"
followed by one "  detail TYPE JSON" line per detail; with --json, one JSON
object instead, {"method", "key", "code", "reply"} or {"method", "key",
"code", "message", "details"}, where details are JSON objects with an
"@type". It exits 0 when the call succeeded, 1 when it failed with a gRPC
status, and 2 on a usage or setup error (a bad flag, an unreadable file,
a module under DIR that does not import), which it explains in one line on
stderr.

It uses only Debian's python3-grpcio and python3-protobuf: grpcio's
generic channel.unary_unary takes the place of the stubs that
grpcio-tools would generate.
"""

import argparse
import base64
import importlib
import json
import math
import os
import pathlib
import sys

try:
    import grpc
    from google.protobuf import descriptor_pool, json_format, message_factory, symbol_database
    from google.protobuf.message import DecodeError
except ImportError as e:
    print(f"client: {e}: this python3 ({sys.executable}) lacks grpc or google.protobuf; "
          "apt-get install python3-grpcio python3-protobuf, and run it with /usr/bin/python3", file=sys.stderr)
    sys.exit(2)

KEY_HEADER = "granary-key"
AUTHORIZATION_HEADER = "authorization"
STATUS_DETAILS_TRAILER = "grpc-status-details-bin"
TOKEN_FILE_ENV = "GRANARY_TOKEN_FILE"


class SetupError(Exception):
    """A problem with the arguments or the generated modules: exit 2."""


def check_metadata_value(what, value, secret=False):
    """Raises SetupError unless value can be a gRPC metadata value.

    A metadata key not ending in -bin takes printable ASCII only (the gRPC
    over HTTP/2 spec's ASCII-Value, 0x20 to 0x7E): grpcio refuses anything
    else with a bare "metadata was invalid". what names the value in the
    error, which shows the value too unless it is secret.
    """
    for i, c in enumerate(value):
        if not " " <= c <= "~":
            shown = "" if secret else f" {value!r}"
            raise SetupError(f"{what}{shown}: a gRPC metadata value must be printable ASCII "
                             f"(0x20 to 0x7E), and {c!r} at index {i} is not")


def check_args(args):
    """Checks the flags that need no file or module, naming the bad one."""
    if args.key is not None:
        check_metadata_value("--key", args.key)
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise SetupError(f"--timeout {args.timeout}: want a finite number of seconds above 0")
    if args.count is not None and args.count <= 0:
        raise SetupError(f"--count {args.count}: want a number of replies above 0")


def load_modules(pb_dir):
    """Imports every *_pb2.py module under pb_dir, registering its types."""
    root = pathlib.Path(pb_dir).resolve()
    if not root.is_dir():
        raise SetupError(f"--pb {pb_dir}: not a directory")
    sys.path.insert(0, str(root))
    try:
        paths = sorted(root.rglob("*_pb2.py"))
    except OSError as e:
        raise SetupError(f"--pb {pb_dir}: {e}") from None
    for path in paths:
        parts = path.relative_to(root).with_suffix("").parts
        bad = [p for p in parts if not p.isidentifier()]
        if bad:
            raise SetupError(f"--pb {pb_dir}: {path} cannot be imported: {bad[0]!r} is not a Python "
                             "module name; is DIR the directory protoc --python_out wrote?")
        try:
            importlib.import_module(".".join(parts))
        except Exception as e:  # an import runs the module: anything can go wrong
            raise SetupError(f"--pb {pb_dir}: {path} does not import: {type(e).__name__}: {e}") from None
    if not paths:
        raise SetupError(f"--pb {pb_dir}: no *_pb2.py modules; generate them with protoc --python_out")


def message_class(descriptor):
    """Returns the generated class of a message descriptor."""
    get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
    if get is not None:
        return get(descriptor)
    return symbol_database.Default().GetPrototype(descriptor)


def find_method(name):
    """Returns the method descriptor of "package.Service/Method"."""
    service, sep, method = name.lstrip("/").partition("/")
    if not sep or not service or not method:
        raise SetupError(f"{name!r}: want package.Service/Method, such as hello.Greeter/SayHello")
    try:
        svc = descriptor_pool.Default().FindServiceByName(service)
    except KeyError:
        raise SetupError(f"no service {service} in the modules under --pb") from None
    m = svc.methods_by_name.get(method)
    if m is None:
        raise SetupError(f"service {service} has no method {method}")
    return m


def read_token(path, source):
    """Reads a bearer token the way granaryctl does (auth.ReadToken).

    source names where path came from (--token-file or the environment)
    for the errors.
    """
    where = f"{source} {path}"
    try:
        with open(path, encoding="ascii", errors="strict") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError as e:
        raise SetupError(f"{where}: not ASCII text: byte {e.object[e.start]:#04x} at offset {e.start}") from None
    except OSError as e:
        raise SetupError(f"{where}: {e.strerror or e}") from None
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            token = line.split()[0]
            check_metadata_value(f"{where}: the token", token, secret=True)
            return token
    raise SetupError(f"{where}: holds no token: every line is blank or a comment")


def status_details(err):
    """Decodes the google.rpc.Status of a failed call's trailer, if any.

    Returns a list of details as JSON objects, each with its "@type"; a
    detail whose type no loaded module defines keeps its bytes, base64.
    """
    raw = None
    for key, value in err.trailing_metadata() or ():
        if key == STATUS_DETAILS_TRAILER:
            raw = value
    if raw is None:
        return []
    try:
        from google.rpc import status_pb2
    except ImportError:
        print(f"client: the call's {STATUS_DETAILS_TRAILER} trailer cannot be decoded: "
              "generate google/rpc/status.proto into --pb", file=sys.stderr)
        return []
    try:
        st = status_pb2.Status.FromString(raw)
    except DecodeError as e:
        print(f"client: the call's {STATUS_DETAILS_TRAILER} trailer is not a google.rpc.Status "
              f"({e}): its details are ignored", file=sys.stderr)
        return []
    if st.code != err.code().value[0]:
        # The trailer must repeat the call's status; one that does not
        # describes some other error.
        print(f"client: {STATUS_DETAILS_TRAILER} has code {st.code}, not the call's "
              f"{err.code().name}: its details are ignored", file=sys.stderr)
        return []
    details = []
    for any_msg in st.details:
        try:
            details.append(json_format.MessageToDict(any_msg))
        except (TypeError, KeyError, DecodeError):  # a type no loaded module defines, or bad bytes
            details.append({"@type": any_msg.type_url,
                            "value": base64.b64encode(any_msg.value).decode("ascii")})
    return details


def call(args):
    """Makes the call args describe, prints its outcome, returns the exit code."""
    method = find_method(args.method)
    request_class = message_class(method.input_type)
    reply_class = message_class(method.output_type)
    try:
        request = json_format.Parse(args.request, request_class())
    except json_format.ParseError as e:
        raise SetupError(f"the request is not a {method.input_type.full_name} in JSON: {e}") from None

    metadata = []
    if args.key is not None:
        metadata.append((KEY_HEADER, args.key))
    token_file, source = args.token_file, "--token-file"
    if not token_file:
        token_file, source = os.environ.get(TOKEN_FILE_ENV), TOKEN_FILE_ENV
    if token_file:
        metadata.append((AUTHORIZATION_HEADER, "Bearer " + read_token(token_file, source)))

    if args.ca:
        try:
            with open(args.ca, "rb") as f:
                ca = f.read()
        except OSError as e:
            raise SetupError(f"--ca {args.ca}: {e.strerror or e}") from None
        channel = grpc.secure_channel(args.target, grpc.ssl_channel_credentials(root_certificates=ca))
    elif token_file:
        raise SetupError("a bearer token needs --ca: it would cross the network in the clear")
    else:
        channel = grpc.insecure_channel(args.target)

    path = f"/{method.containing_service.full_name}/{method.name}"
    name = path[1:]
    out = {"method": name, "key": args.key}
    if method.server_streaming:
        with channel:
            return stream(args, channel, path, request, request_class, reply_class, metadata, out)
    if args.count is not None:
        raise SetupError(f"--count: {name} answers once; --count is for methods that stream their replies")
    with channel:
        rpc = channel.unary_unary(path, request_serializer=request_class.SerializeToString,
                                  response_deserializer=reply_class.FromString)
        try:
            reply = rpc(request, metadata=metadata, timeout=args.timeout, wait_for_ready=args.wait)
        except grpc.RpcError as err:
            print_failure(args, out, err)
            return 1
    out.update(code=grpc.StatusCode.OK.name, reply=json_format.MessageToDict(reply))
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{name}: OK {json.dumps(out['reply'])}")
    return 0


def print_failure(args, out, err):
    """Prints a failed call's outcome."""
    out.update(code=err.code().name, message=err.details(), details=status_details(err))
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['method']}: {out['code']}: {out['message']}")
        for d in out["details"]:
            fields = {k: v for k, v in d.items() if k != "@type"}
            print(f"  detail {d['@type'].rpartition('/')[2]} {json.dumps(fields)}")


def stream(args, channel, path, request, request_class, reply_class, metadata, out):
    """Makes a call whose replies stream, printing each as it comes.

    Returns 0 once --count replies came, or when the server ends the
    stream without an error; 1 when it fails (its deadline passing too).
    """
    rpc = channel.unary_stream(path, request_serializer=request_class.SerializeToString,
                               response_deserializer=reply_class.FromString)
    call = rpc(request, metadata=metadata, timeout=args.timeout, wait_for_ready=args.wait)
    got = 0
    try:
        for reply in call:
            got += 1
            line = dict(out, code=grpc.StatusCode.OK.name, reply=json_format.MessageToDict(reply))
            if args.json:
                print(json.dumps(line), flush=True)
            else:
                print(f"{out['method']}: OK {json.dumps(line['reply'])}", flush=True)
            if args.count is not None and got >= args.count:
                call.cancel()
                return 0
    except grpc.RpcError as err:
        print_failure(args, out, err)
        return 1
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pb", required=True, metavar="DIR",
                   help="the directory of the *_pb2.py modules protoc generated")
    p.add_argument("--target", default="127.0.0.1:30000", metavar="HOST:PORT",
                   help="the silo's gateway (default %(default)s)")
    p.add_argument("--ca", metavar="FILE",
                   help="the CA certificate of the gateway's TLS, PEM; without it, plaintext")
    p.add_argument("--key", metavar="KEY", help=f"the grain key, sent as {KEY_HEADER} metadata")
    p.add_argument("--token-file", metavar="FILE",
                   help=f"file holding the bearer token (env {TOKEN_FILE_ENV})")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="the call's deadline (default %(default)s)")
    p.add_argument("--wait", action="store_true",
                   help="wait, within the deadline, for the gateway to accept connections")
    p.add_argument("--json", action="store_true",
                   help="print the outcome as one JSON object (one a reply, for a method that streams)")
    p.add_argument("--count", type=int, metavar="N",
                   help="for a method that streams its replies: stop after N of them")
    p.add_argument("method", metavar="METHOD", help="package.Service/Method, such as hello.Greeter/SayHello")
    p.add_argument("request", metavar="JSON", nargs="?", default="{}",
                   help="the request message in JSON (default {})")
    args = p.parse_args(argv)
    try:
        check_args(args)
        load_modules(args.pb)
        return call(args)
    except (SetupError, OSError, UnicodeError) as e:
        print(f"client: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
