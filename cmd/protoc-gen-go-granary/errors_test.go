package main

import (
	"strings"
	"testing"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// badHeader starts every inline file of TestBadInput: the imports a case may
// need and two plain messages, Req and Resp.
const badHeader = `syntax = "proto3";
package bad;
import "google/protobuf/empty.proto";
import "granary/v1/options.proto";
option go_package = "example.com/granarytest/bad;badpb";
message Req {}
message Resp {}
`

// TestBadInput checks that each kind of bad input fails the plugin with an
// error that names the file, the service and, for a method problem, the
// rpc, and that the plugin then writes no file.
func TestBadInput(t *testing.T) {
	tests := []struct {
		name   string
		body   string   // appended to badHeader
		want   []string // each must appear in the error
		reject []string // none may appear in the error
	}{
		{
			name: "client streaming",
			body: `service S { rpc Up(stream Req) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc Up: streaming rpcs are not supported yet (this one streams its requests)"},
		},
		{
			name: "server streaming",
			body: `service S { rpc Down(Req) returns (stream Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc Down: streaming rpcs are not supported yet (this one streams its responses)"},
		},
		{
			name: "bidirectional streaming",
			body: `service S { rpc Chat(stream Req) returns (stream Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc Chat: streaming rpcs are not supported yet (this one streams in both directions)"},
		},
		{
			name: "max_local_workers without stateless_worker",
			body: `service S { option (granary.v1.grain) = {max_local_workers: 4}; }`,
			want: []string{"bad.proto: service bad.S: grain option max_local_workers (4) requires stateless_worker: true"},
		},
		{
			name: "negative max_local_workers",
			body: `service S { option (granary.v1.grain) = {stateless_worker: true, max_local_workers: -1}; }`,
			want: []string{"bad.proto: service bad.S: grain option max_local_workers is negative (-1)"},
		},
		{
			name: "stateless worker placed by hash",
			body: `service S { option (granary.v1.grain) = {stateless_worker: true, placement: PLACEMENT_HASH}; }`,
			want: []string{"bad.proto: service bad.S: grain option stateless_worker does not allow placement PLACEMENT_HASH"},
		},
		{
			name: "stateless worker placed at random",
			body: `service S { option (granary.v1.grain) = {stateless_worker: true, placement: PLACEMENT_RANDOM}; }`,
			want: []string{"grain option stateless_worker does not allow placement PLACEMENT_RANDOM"},
		},
		{
			name: "stateless worker placed by activation count",
			body: `service S { option (granary.v1.grain) = {stateless_worker: true, placement: PLACEMENT_ACTIVATION_COUNT}; }`,
			want: []string{"grain option stateless_worker does not allow placement PLACEMENT_ACTIVATION_COUNT"},
		},
		{
			name: "stateless worker placed by silo role",
			body: `service S { option (granary.v1.grain) = {stateless_worker: true, placement: PLACEMENT_SILO_ROLE, silo_role: "edge"}; }`,
			want: []string{"bad.proto: service bad.S: grain option stateless_worker does not allow placement PLACEMENT_SILO_ROLE: a stateless worker is always activated on the silo that receives the call, so only PLACEMENT_UNSPECIFIED and PLACEMENT_PREFER_LOCAL apply\n"},
		},
		{
			name: "stateless worker placed by silo role without a role",
			body: `service S { option (granary.v1.grain) = {stateless_worker: true, placement: PLACEMENT_SILO_ROLE}; }`,
			want: []string{"bad.proto: service bad.S: grain option stateless_worker does not allow placement PLACEMENT_SILO_ROLE: a stateless worker is always activated on the silo that receives the call, so only PLACEMENT_UNSPECIFIED and PLACEMENT_PREFER_LOCAL apply\n"},
			// The placement is refused, so a role would not help.
			reject: []string{"requires silo_role"},
		},
		{
			name: "silo_role without a placement",
			body: `service S { option (granary.v1.grain) = {silo_role: "edge"}; }`,
			want: []string{"bad.proto: service bad.S: grain option silo_role (\"edge\") requires placement: PLACEMENT_SILO_ROLE, not PLACEMENT_UNSPECIFIED\n"},
		},
		{
			name: "silo_role with another placement",
			body: `service S { option (granary.v1.grain) = {placement: PLACEMENT_HASH, silo_role: "edge"}; }`,
			want: []string{"bad.proto: service bad.S: grain option silo_role (\"edge\") requires placement: PLACEMENT_SILO_ROLE, not PLACEMENT_HASH\n"},
		},
		{
			name: "placement by silo role without silo_role",
			body: `service S { option (granary.v1.grain) = {placement: PLACEMENT_SILO_ROLE}; }`,
			want: []string{"bad.proto: service bad.S: grain option placement PLACEMENT_SILO_ROLE requires silo_role: the role that a silo's configuration must list for the silo to host the type\n"},
		},
		{
			name: "placement by silo role with an empty silo_role",
			body: `service S { option (granary.v1.grain) = {placement: PLACEMENT_SILO_ROLE, silo_role: ""}; }`,
			want: []string{"bad.proto: service bad.S: grain option placement PLACEMENT_SILO_ROLE requires silo_role"},
		},
		{
			name: "silo_role with a space",
			body: `service S { option (granary.v1.grain) = {placement: PLACEMENT_SILO_ROLE, silo_role: "gpu edge"}; }`,
			want: []string{"bad.proto: service bad.S: grain option silo_role \"gpu edge\" contains whitespace (U+0020)\n"},
		},
		{
			name: "silo_role with a trailing newline",
			body: `service S { option (granary.v1.grain) = {placement: PLACEMENT_SILO_ROLE, silo_role: "edge\n"}; }`,
			want: []string{"bad.proto: service bad.S: grain option silo_role \"edge\\n\" contains whitespace (U+000A)\n"},
		},
		{
			name: "silo_role with a no-break space",
			body: `service S { option (granary.v1.grain) = {placement: PLACEMENT_SILO_ROLE, silo_role: "edge\u00a0a"}; }`,
			want: []string{"grain option silo_role \"edge\\u00a0a\" contains whitespace (U+00A0)\n"},
		},
		{
			name: "silo_role with a control character",
			body: `service S { option (granary.v1.grain) = {placement: PLACEMENT_SILO_ROLE, silo_role: "edge\x00"}; }`,
			want: []string{"bad.proto: service bad.S: grain option silo_role \"edge\\x00\" contains the unprintable character U+0000\n"},
		},
		{
			name: "unknown placement",
			body: `service S { option (granary.v1.grain) = {placement: 9}; }`,
			want: []string{"bad.proto: service bad.S: grain option placement has the unknown value 9"},
		},
		{
			name: "unknown key kind",
			body: `service S { option (granary.v1.grain) = {key_kind: 7}; }`,
			want: []string{"bad.proto: service bad.S: grain option key_kind has the unknown value 7"},
		},
		{
			name: "negative collection_age",
			body: `service S { option (granary.v1.grain) = {collection_age: {seconds: -5}}; }`,
			want: []string{"bad.proto: service bad.S: grain option collection_age is negative (seconds: -5, nanos: 0)"},
		},
		{
			name: "collection_age with opposite signs",
			body: `service S { option (granary.v1.grain) = {collection_age: {seconds: 1, nanos: -1}}; }`,
			want: []string{"bad.proto: service bad.S: grain option collection_age is not normalised (seconds: 1, nanos: -1)"},
		},
		{
			name: "collection_age with a second of nanos",
			body: `service S { option (granary.v1.grain) = {collection_age: {nanos: 1000000000}}; }`,
			want: []string{"grain option collection_age is not normalised (seconds: 0, nanos: 1000000000)"},
		},
		{
			name: "collection_age too long for time.Duration",
			body: `service S { option (granary.v1.grain) = {collection_age: {seconds: 10000000000}}; }`,
			want: []string{"grain option collection_age is too long for a Go time.Duration (seconds: 10000000000)"},
		},
		{
			name: "collection_age out of the range of Duration",
			body: `service S { option (granary.v1.grain) = {collection_age: {seconds: 315576000001}}; }`,
			want: []string{"grain option collection_age is out of the range of google.protobuf.Duration (seconds: 315576000001)"},
		},
		{
			name: "negative timeout",
			body: `service S { rpc M(Req) returns (Resp) { option (granary.v1.method) = {timeout: {nanos: -1}}; } }`,
			want: []string{"bad.proto: service bad.S: rpc M: method option timeout is negative (seconds: 0, nanos: -1)"},
		},
		{
			name: "timeout not normalised",
			body: `service S { rpc M(Req) returns (Resp) { option (granary.v1.method) = {timeout: {seconds: -1, nanos: 5}}; } }`,
			want: []string{"bad.proto: service bad.S: rpc M: method option timeout is not normalised (seconds: -1, nanos: 5)"},
		},
		{
			name: "one_way with a response",
			body: `service S { rpc M(Req) returns (Resp) { option (granary.v1.method) = {one_way: true}; } }`,
			want: []string{"bad.proto: service bad.S: rpc M: method option one_way requires the response type google.protobuf.Empty, not bad.Resp"},
		},
		{
			name: "one_way and read_only",
			body: `service S { rpc M(Req) returns (google.protobuf.Empty) { option (granary.v1.method) = {one_way: true, read_only: true}; } }`,
			want: []string{"bad.proto: service bad.S: rpc M: method option one_way cannot be combined with read_only"},
		},
		{
			name: "one_way and timeout",
			body: `service S { rpc M(Req) returns (google.protobuf.Empty) { option (granary.v1.method) = {one_way: true, timeout: {seconds: 1}}; } }`,
			want: []string{"bad.proto: service bad.S: rpc M: method option one_way cannot be combined with timeout: a one-way call has no reply to time out"},
		},
		{
			name: "one_way and a zero timeout",
			body: `service S { rpc M(Req) returns (google.protobuf.Empty) { option (granary.v1.method) = {one_way: true, timeout: {}}; } }`,
			want: []string{"rpc M: method option one_way cannot be combined with timeout"},
		},
		{
			name: "repeated key field",
			body: `message K { repeated string id = 1 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc M: request bad.K: key field id is repeated; the key option needs a singular string, int64, int32, uint64 or uint32 field\n"},
		},
		{
			name: "map key field",
			body: `message K { map<string, string> ids = 1 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc M: request bad.K: key field ids is a map; the key option needs a singular string"},
		},
		{
			name: "bytes key field",
			body: `message K { bytes id = 1 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc M: request bad.K: key field id is of type bytes; the key option needs a singular string, int64, int32, uint64 or uint32 field\n"},
		},
		{
			name: "double key field",
			body: `message K { double id = 1 [(granary.v1.key) = true]; } service S { option (granary.v1.grain) = {key_kind: KEY_KIND_INT64}; rpc M(K) returns (Resp); }`,
			want: []string{"rpc M: request bad.K: key field id is of type double; the key option needs"},
		},
		{
			name: "sint64 key field",
			body: `message K { sint64 id = 1 [(granary.v1.key) = true]; } service S { option (granary.v1.grain) = {key_kind: KEY_KIND_INT64}; rpc M(K) returns (Resp); }`,
			want: []string{"rpc M: request bad.K: key field id is of type sint64; the key option needs"},
		},
		{
			name: "message key field",
			body: `message K { Req id = 1 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); }`,
			want: []string{"rpc M: request bad.K: key field id is of type message; the key option needs"},
		},
		{
			name: "enum key field",
			body: `enum E { E_UNSPECIFIED = 0; } message K { E id = 1 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); }`,
			want: []string{"rpc M: request bad.K: key field id is of type enum; the key option needs"},
		},
		{
			name: "two key fields",
			body: `message K { string a = 1 [(granary.v1.key) = true]; string b = 2; string c = 3 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc M: request bad.K: 2 fields have the key option (a, c); at most one may carry the grain key\n"},
		},
		{
			name: "integer key field of a grain with string keys",
			body: `message K { int64 id = 1 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc M: request bad.K: key field id is of type int64, but the grain option key_kind is KEY_KIND_STRING, whose keys are strings: the key field must be a string\n"},
		},
		{
			name: "integer key field of a grain with UUID keys",
			body: `message K { uint32 id = 1 [(granary.v1.key) = true]; } service S { option (granary.v1.grain) = {key_kind: KEY_KIND_UUID}; rpc M(K) returns (Resp); }`,
			want: []string{"rpc M: request bad.K: key field id is of type uint32, but the grain option key_kind is KEY_KIND_UUID, whose keys are strings of the form <canonical UUID>: the key field must be a string\n"},
		},
		{
			name: "integer key field of a grain with int64 compound keys",
			body: `message K { int64 id = 1 [(granary.v1.key) = true]; } service S { option (granary.v1.grain) = {key_kind: KEY_KIND_INT64_COMPOUND}; rpc M(K) returns (Resp); }`,
			want: []string{`bad.proto: service bad.S: rpc M: request bad.K: key field id is of type int64, but the grain option key_kind is KEY_KIND_INT64_COMPOUND, whose keys are strings of the form <decimal int64>+<extension>: the key field must be a string` + "\n"},
		},
		{
			name: "integer key field of a grain with UUID compound keys",
			body: `message K { uint64 id = 1 [(granary.v1.key) = true]; } service S { option (granary.v1.grain) = {key_kind: KEY_KIND_UUID_COMPOUND}; rpc M(K) returns (Resp); }`,
			want: []string{`rpc M: request bad.K: key field id is of type uint64, but the grain option key_kind is KEY_KIND_UUID_COMPOUND, whose keys are strings of the form <canonical UUID>+<extension>: the key field must be a string` + "\n"},
		},
		{
			name: "keep_alive with collection_age",
			body: `service S { option (granary.v1.grain) = {keep_alive: true, collection_age: {seconds: 60}}; }`,
			want: []string{"bad.proto: service bad.S: grain option keep_alive cannot be combined with collection_age: a kept-alive activation is never collected for being idle, so a collection age would have no effect\n"},
		},
		{
			name: "keep_alive with a zero collection_age",
			body: `service S { option (granary.v1.grain) = {keep_alive: true, collection_age: {}}; }`,
			want: []string{"grain option keep_alive cannot be combined with collection_age"},
		},
		{
			name: "observer with keep_alive",
			body: `service S { option (granary.v1.grain) = {observer: true, keep_alive: true}; }`,
			want: []string{"bad.proto: service bad.S: grain option keep_alive cannot be set with observer: true"},
		},
		{
			name: "string key field of a grain with int64 keys",
			body: `message K { string id = 1 [(granary.v1.key) = true]; } service S { option (granary.v1.grain) = {key_kind: KEY_KIND_INT64}; rpc M(K) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc M: request bad.K: key field id is of type string, but the grain option key_kind is KEY_KIND_INT64: the key field must be an int64, int32, uint64 or uint32\n"},
		},
		{
			name: "a bad key field in a request two rpcs share",
			body: `message K { bool id = 1 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); rpc N(K) returns (Resp); }`,
			want: []string{
				"bad.proto: service bad.S: rpc M: request bad.K: key field id is of type bool",
				"bad.proto: service bad.S: rpc N: request bad.K: key field id is of type bool",
			},
		},
		{
			name: "every problem of a file at once",
			body: `service S {
				option (granary.v1.grain) = {max_local_workers: 2};
				rpc Up(stream Req) returns (Resp);
				rpc Tell(Req) returns (Resp) { option (granary.v1.method) = {one_way: true}; }
			}
			service T { rpc Down(Req) returns (stream Resp); }`,
			want: []string{
				"bad.proto: service bad.S: grain option max_local_workers (2) requires stateless_worker: true\n",
				"bad.proto: service bad.S: rpc Up: streaming rpcs are not supported yet",
				"bad.proto: service bad.S: rpc Tell: method option one_way requires the response type google.protobuf.Empty, not bad.Resp\n",
				"bad.proto: service bad.T: rpc Down: streaming rpcs are not supported yet",
			},
		},
		{
			name: "observer with placement",
			body: `service S { option (granary.v1.grain) = {observer: true, placement: PLACEMENT_HASH}; }`,
			want: []string{"bad.proto: service bad.S: grain option placement cannot be set with observer: true: an observer is an object of a client, not a grain, so only observer may be set\n"},
		},
		{
			name: "observer that is reentrant",
			body: `service S { option (granary.v1.grain) = {observer: true, reentrant: true}; }`,
			want: []string{"bad.proto: service bad.S: grain option reentrant cannot be set with observer: true"},
		},
		{
			name: "observer with a zero collection_age",
			body: `service S { option (granary.v1.grain) = {observer: true, collection_age: {}}; }`,
			want: []string{"bad.proto: service bad.S: grain option collection_age cannot be set with observer: true"},
		},
		{
			name: "observer that is a stateless worker",
			body: `service S { option (granary.v1.grain) = {observer: true, stateless_worker: true}; }`,
			want: []string{"bad.proto: service bad.S: grain option stateless_worker cannot be set with observer: true"},
		},
		{
			name: "observer with max_local_workers",
			body: `service S { option (granary.v1.grain) = {observer: true, max_local_workers: 2}; }`,
			want: []string{"bad.proto: service bad.S: grain option max_local_workers cannot be set with observer: true"},
			// The grain checks do not run on an observer.
			reject: []string{"requires stateless_worker"},
		},
		{
			name: "observer with string keys",
			body: `service S { option (granary.v1.grain) = {observer: true, key_kind: KEY_KIND_STRING}; }`,
			want: []string{"bad.proto: service bad.S: grain option key_kind cannot be set with observer: true"},
		},
		{
			name:   "observer with a silo role",
			body:   `service S { option (granary.v1.grain) = {observer: true, silo_role: "edge"}; }`,
			want:   []string{"bad.proto: service bad.S: grain option silo_role cannot be set with observer: true"},
			reject: []string{"requires placement"},
		},
		{
			name: "observer with every grain option",
			body: `service S { option (granary.v1.grain) = {
				observer: true, placement: PLACEMENT_SILO_ROLE, reentrant: true, collection_age: {seconds: 1},
				stateless_worker: true, max_local_workers: 1, key_kind: KEY_KIND_UUID, silo_role: "gpu"
			}; }`,
			want: []string{
				"bad.proto: service bad.S: grain option placement cannot be set with observer: true",
				"bad.proto: service bad.S: grain option reentrant cannot be set with observer: true",
				"bad.proto: service bad.S: grain option collection_age cannot be set with observer: true",
				"bad.proto: service bad.S: grain option stateless_worker cannot be set with observer: true",
				"bad.proto: service bad.S: grain option max_local_workers cannot be set with observer: true",
				"bad.proto: service bad.S: grain option key_kind cannot be set with observer: true",
				"bad.proto: service bad.S: grain option silo_role cannot be set with observer: true",
			},
			reject: []string{"does not allow placement"},
		},
		{
			name: "observer method that always interleaves",
			body: `service S { option (granary.v1.grain) = {observer: true}; rpc M(Req) returns (Resp) { option (granary.v1.method) = {always_interleave: true}; } }`,
			want: []string{"bad.proto: service bad.S: rpc M: method option always_interleave is not allowed on an observer: it lets requests of a grain activation interleave, and calls to an observer run one at a time\n"},
		},
		{
			name: "observer method that is read-only",
			body: `service S { option (granary.v1.grain) = {observer: true}; rpc M(Req) returns (Resp) { option (granary.v1.method) = {read_only: true}; } }`,
			want: []string{"bad.proto: service bad.S: rpc M: method option read_only is not allowed on an observer: it lets read-only requests of a grain activation interleave, and calls to an observer run one at a time\n"},
		},
		{
			name: "one-way observer method with a response",
			body: `service S { option (granary.v1.grain) = {observer: true}; rpc M(Req) returns (Resp) { option (granary.v1.method) = {one_way: true}; } }`,
			want: []string{"bad.proto: service bad.S: rpc M: method option one_way requires the response type google.protobuf.Empty, not bad.Resp"},
		},
		{
			name: "one-way observer method with a timeout",
			body: `service S { option (granary.v1.grain) = {observer: true}; rpc M(Req) returns (google.protobuf.Empty) { option (granary.v1.method) = {one_way: true, timeout: {seconds: 1}}; } }`,
			want: []string{"bad.proto: service bad.S: rpc M: method option one_way cannot be combined with timeout"},
		},
		{
			name: "streaming observer method",
			body: `service S { option (granary.v1.grain) = {observer: true}; rpc M(stream Req) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc M: streaming rpcs are not supported yet (this one streams its requests)"},
		},
		{
			name: "an observer named like a grain's interface",
			body: `service Foo {} service FooGrain { option (granary.v1.grain) = {observer: true}; }`,
			want: []string{"bad.proto: service bad.FooGrain: generated name FooGrain collides with the same name generated for service bad.Foo (bad.proto)"},
		},
		{
			name: "an observer named like a message",
			body: `message Watcher {} service watcher { option (granary.v1.grain) = {observer: true}; }`,
			want: []string{"bad.proto: service bad.watcher: generated name Watcher collides with message bad.Watcher (bad.proto)"},
		},
		{
			name: "an observer rpc named ID",
			body: `service S { option (granary.v1.grain) = {observer: true}; rpc ID(Req) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc ID: generated method SRef.ID collides with the method SRef.ID"},
		},
		{
			name: "services with the same Go name",
			body: `service FooBar {} service foo_bar {}`,
			want: []string{"bad.proto: service bad.foo_bar: generated name FooBarGrainType collides with the same name generated for service bad.FooBar (bad.proto)"},
		},
		{
			name: "a service named like another's stub",
			body: `service Foo {} service UnimplementedFoo {}`,
			want: []string{"bad.proto: service bad.UnimplementedFoo: generated name UnimplementedFooGrain collides with the same name generated for service bad.Foo (bad.proto)"},
		},
		{
			name: "handlers with the same name",
			body: `service A { rpc B_C(Req) returns (Resp); } service A_B { rpc C(Req) returns (Resp); }`,
			want: []string{"bad.proto: service bad.A_B: generated name _A_B_C_Handler collides with the same name generated for service bad.A (bad.proto)"},
		},
		{
			name: "a service named like a message's reference",
			body: `message FooRef {} service Foo {}`,
			want: []string{"bad.proto: service bad.Foo: generated name FooRef collides with message bad.FooRef (bad.proto)"},
		},
		{
			name: "a service named like a nested message",
			body: `message foo { message ServiceDesc {} } service Foo {}`,
			want: []string{"generated name Foo_ServiceDesc collides with message bad.foo.ServiceDesc (bad.proto)"},
		},
		{
			name: "a service named like an enum value",
			body: `enum Kind { KIND_UNSPECIFIED = 0; Grain = 1; } service Kind_ {}`,
			want: []string{"generated name Kind_Grain collides with enum value bad.Grain (bad.proto)"},
		},
		{
			name: "rpcs with the same Go name",
			body: `service S { rpc FooBar(Req) returns (Resp); rpc foo_bar(Req) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc foo_bar: generated method SRef.FooBar collides with the method generated for rpc FooBar"},
		},
		{
			name: "an rpc named like another's async variant",
			body: `service S { rpc Get(Req) returns (Resp); rpc GetAsync(Req) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc GetAsync: generated method SRef.GetAsync collides with the method generated for rpc Get"},
		},
		{
			name: "an rpc named ID",
			body: `service S { rpc ID(Req) returns (Resp); }`,
			want: []string{"bad.proto: service bad.S: rpc ID: generated method SRef.ID collides with the method SRef.ID"},
		},
		{
			name: "an rpc named like a lifecycle hook",
			body: `service S { rpc OnActivate(Req) returns (Resp); rpc on_deactivate(Req) returns (Resp); }`,
			want: []string{
				"bad.proto: service bad.S: rpc OnActivate: the Go method name OnActivate is taken by the lifecycle hook grain.Activator",
				"bad.proto: service bad.S: rpc on_deactivate: the Go method name OnDeactivate is taken by the lifecycle hook grain.Deactivator",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := runPlugin(t, map[string]string{"bad.proto": badHeader + tt.body + "\n"}, "bad.proto")
			if resp.Error == nil {
				t.Fatalf("plugin succeeded, want an error containing %q", tt.want)
			}
			got := resp.GetError() + "\n"
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", got, w)
				}
			}
			for _, r := range tt.reject {
				if strings.Contains(got, r) {
					t.Errorf("error\n%s\ncontains\n%s", got, r)
				}
			}
			if len(resp.File) != 0 {
				t.Errorf("plugin wrote %d files along with its error, want none", len(resp.File))
			}
		})
	}
}

// TestNewerOptions checks that options set in a newer options.proto, with
// fields this generator does not know, fail the plugin rather than being
// ignored.
func TestNewerOptions(t *testing.T) {
	newer := strings.Replace(readFile(t, protoRoot+"/granary/v1/options.proto"),
		"message MethodOptions {", "message MethodOptions {\n  bool from_the_future = 99;", 1)
	if !strings.Contains(newer, "from_the_future") {
		t.Fatal("could not add a field to MethodOptions")
	}
	src := badHeader + `service S { rpc M(Req) returns (Resp) { option (granary.v1.method) = {from_the_future: true}; } }` + "\n"
	resp := runPlugin(t, map[string]string{"bad.proto": src, "granary/v1/options.proto": newer}, "bad.proto")
	want := "bad.proto: service bad.S: rpc M: method options hold fields that this protoc-gen-go-granary (" + version + ") does not know"
	if !strings.Contains(resp.GetError(), want) {
		t.Errorf("error %q does not contain %q", resp.GetError(), want)
	}
}

// TestAllowedCombinations checks option combinations that must pass.
func TestAllowedCombinations(t *testing.T) {
	tests := []struct{ name, body string }{
		{"read_only with always_interleave", `service S { rpc M(Req) returns (Resp) { option (granary.v1.method) = {read_only: true, always_interleave: true}; } }`},
		{"one_way with always_interleave", `service S { rpc M(Req) returns (google.protobuf.Empty) { option (granary.v1.method) = {one_way: true, always_interleave: true}; } }`},
		{"stateless worker placed locally", `service S { option (granary.v1.grain) = {stateless_worker: true, placement: PLACEMENT_PREFER_LOCAL, max_local_workers: 1}; }`},
		{"reentrant stateless worker", `service S { option (granary.v1.grain) = {stateless_worker: true, reentrant: true}; }`},
		{"placement by silo role", `service S { option (granary.v1.grain) = {placement: PLACEMENT_SILO_ROLE, silo_role: "gpu-a100.eu/west"}; }`},
		{"placement by a non-ASCII silo role", `service S { option (granary.v1.grain) = {placement: PLACEMENT_SILO_ROLE, silo_role: "bords-été"}; }`},
		{"zero durations", `service S { option (granary.v1.grain) = {collection_age: {}}; rpc M(Req) returns (Resp) { option (granary.v1.method) = {timeout: {}}; } }`},
		{"string key field", `message K { string id = 1 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); }`},
		{"string key field of a grain with UUID keys", `message K { string id = 1 [(granary.v1.key) = true]; } service S { option (granary.v1.grain) = {key_kind: KEY_KIND_UUID}; rpc M(K) returns (Resp); }`},
		{"string key fields of grains with compound keys", `message K { string id = 1 [(granary.v1.key) = true]; }
			service I { option (granary.v1.grain) = {key_kind: KEY_KIND_INT64_COMPOUND}; rpc M(K) returns (Resp); }
			service U { option (granary.v1.grain) = {key_kind: KEY_KIND_UUID_COMPOUND}; rpc M(K) returns (Resp); }`},
		{"kept-alive stateless worker", `service S { option (granary.v1.grain) = {keep_alive: true, stateless_worker: true}; }`},
		{"keep_alive: false with collection_age", `service S { option (granary.v1.grain) = {keep_alive: false, collection_age: {seconds: 60}}; }`},
		{"integer key fields of grains with int64 keys", `message A { int64 id = 1 [(granary.v1.key) = true]; } message B { int32 id = 1 [(granary.v1.key) = true]; } message C { uint64 id = 1 [(granary.v1.key) = true]; } message D { uint32 id = 1 [(granary.v1.key) = true]; }
			service S { option (granary.v1.grain) = {key_kind: KEY_KIND_INT64}; rpc MA(A) returns (Resp); rpc MB(B) returns (Resp); rpc MC(C) returns (Resp); rpc MD(D) returns (Resp); }`},
		{"optional key field", `message K { optional int64 id = 1 [(granary.v1.key) = true]; } service S { option (granary.v1.grain) = {key_kind: KEY_KIND_INT64}; rpc M(K) returns (Resp); }`},
		{"key field in a oneof", `message K { oneof o { string name = 1 [(granary.v1.key) = true]; int64 n = 2; } } service S { rpc M(K) returns (Resp); }`},
		{"one key field among fields marked false", `message K { string a = 1 [(granary.v1.key) = false]; string b = 2 [(granary.v1.key) = true]; } service S { rpc M(K) returns (Resp); }`},
		{"two key fields in a message no rpc takes", `message K { string a = 1 [(granary.v1.key) = true]; string b = 2 [(granary.v1.key) = true]; } service S { rpc M(Req) returns (Resp); }`},
		{"observer with one-way and timed methods", `service S { option (granary.v1.grain) = {observer: true}; rpc N(Req) returns (google.protobuf.Empty) { option (granary.v1.method) = {one_way: true}; } rpc A(Req) returns (Resp) { option (granary.v1.method) = {timeout: {seconds: 3}}; } }`},
		{"observer with observer: false spelled out beside grain options", `service S { option (granary.v1.grain) = {observer: false, reentrant: true}; }`},
		{"observer request with key fields", `message K { bytes a = 1 [(granary.v1.key) = true]; string b = 2 [(granary.v1.key) = true]; } service S { option (granary.v1.grain) = {observer: true}; rpc M(K) returns (Resp); }`},
		{"observer rpcs named like lifecycle hooks", `service S { option (granary.v1.grain) = {observer: true}; rpc OnActivate(Req) returns (Resp); rpc OnDeactivate(Req) returns (Resp); }`},
		{"observer and grain of the same stem", `service Room {} service RoomObserver { option (granary.v1.grain) = {observer: true}; }`},
		{"longest time.Duration", `service S { option (granary.v1.grain) = {collection_age: {seconds: 9223372036, nanos: 854775807}}; }`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := runPlugin(t, map[string]string{"bad.proto": badHeader + tt.body + "\n"}, "bad.proto")
			if resp.Error != nil {
				t.Fatalf("plugin failed: %s", resp.GetError())
			}
			if len(resp.File) != 1 {
				t.Errorf("plugin wrote %d files, want 1", len(resp.File))
			}
		})
	}
}

// TestKeyKindsMatchGrain: every key kind of options.proto but
// KEY_KIND_UNSPECIFIED has a grain.KeyKind constant to emit and a
// grain.KeyKind whose form the key field problems spell, and the two are
// the same kind: KEY_KIND_INT64_COMPOUND is grain.KeyInt64Compound, whose
// String is "int64_compound".
func TestKeyKindsMatchGrain(t *testing.T) {
	values := granaryv1.KeyKind(0).Descriptor().Values()
	for i := 0; i < values.Len(); i++ {
		kk := granaryv1.KeyKind(values.Get(i).Number())
		if kk == granaryv1.KeyKind_KEY_KIND_UNSPECIFIED {
			continue
		}
		k, ok := grainKeyKinds[kk]
		if !ok {
			t.Errorf("%v has no grain.KeyKind in grainKeyKinds", kk)
			continue
		}
		if want := strings.ToLower(strings.TrimPrefix(kk.String(), "KEY_KIND_")); k.String() != want {
			t.Errorf("grainKeyKinds[%v] = %v, want the kind %q", kk, k, want)
		}
		// KeyInt64Compound is "Key" and "int64_compound" without the '_'
		// and in other case.
		if ident := keyKindIdents[kk]; !strings.EqualFold(ident, "Key"+strings.ReplaceAll(k.String(), "_", "")) {
			t.Errorf("keyKindIdents[%v] = %q, want the constant of %v", kk, ident, k)
		}
	}
}
