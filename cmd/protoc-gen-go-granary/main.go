// Command protoc-gen-go-granary is a protoc plugin that turns protobuf
// services into Granary grain types. For every service X in a .proto file it
// writes, into <file>_granary.pb.go beside the output of protoc-gen-go:
//
//   - XGrainType, the grain type name (the service's full proto name);
//   - XGrain, the interface a grain implementation satisfies, and
//     UnimplementedXGrain, an embeddable stub;
//   - XRef, a typed reference with a blocking and an ...Async method per rpc,
//     built with NewXRef from a key or with XRefFromID;
//   - X_ServiceDesc, the dispatch table and options that the runtime reads,
//     and RegisterXGrain, which hands it to a grain.Registrar.
//
// A service with the grain option observer is an observer interface
// instead: objects outside the cluster implement it, and grains call them.
// For it the plugin writes XObserverType; X, the interface the observer
// implements, whose methods take a context.Context, and UnimplementedX;
// XRef with XRefFromID but no NewXRef, since the host makes observer IDs;
// X_ServiceDesc, marked Observer, whose methods have Observe dispatch
// functions and no Handler; and CreateX, which hands it with an
// implementation to a grain.ObserverHost. It writes no XGrain and no
// RegisterXGrain.
//
// The grain and method options of proto/granary/v1/options.proto become
// fields of X_ServiceDesc. The plugin checks them and fails, naming the file,
// service and rpc, when they contradict each other or when an rpc streams.
// It also checks the key field option of each rpc's request, which the
// generated code does not use but a silo's plain gRPC service does
// (silo/grpcapi): at most one marked field, of a type that suits the
// grain's key_kind. An observer service may set no grain option besides
// observer, its rpcs may not be always_interleave or read_only (which
// arrange the turns of an activation), and the key option of its requests
// is not checked, since observers are not served over plain gRPC.
//
// Usage with buf (see buf.gen.yaml at the repository root):
//
//	plugins:
//	  - local: bin/protoc-gen-go-granary
//	    out: proto
//	    opt: paths=source_relative
//
// The plugin takes protoc-gen-go's path options (paths=import,
// paths=source_relative, module=..., M...) and no others.
package main

import (
	"fmt"
	"os"

	"google.golang.org/protobuf/compiler/protogen"
)

// version is written into the header of every generated file. Raise it
// when the generated code changes shape, so a reader can tell outputs of
// different generators apart.
const version = "v0.1.0"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println("protoc-gen-go-granary", version)
		return
	}
	protogen.Options{}.Run(generate)
}
