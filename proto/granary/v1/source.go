package granaryv1

import _ "embed" // for OptionsProto

// OptionsProto is the text of granary/v1/options.proto, byte for byte as
// it is in this module, for tools that hand it to modules outside it: a
// .proto file that sets Granary's options must import it, and
// protoc-gen-go-granary -print-options writes it out, so a module needs no
// copy of this repository to compile its grain protos. Programs that do
// not refer to it do not carry it: the linker drops it.
//
//go:embed options.proto
var OptionsProto string
