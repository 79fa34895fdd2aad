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
//
// Run directly, with a flag, it does one of two other things and exits:
//
//	protoc-gen-go-granary -print-options > granary/v1/options.proto
//	protoc-gen-go-granary -version
//
// -print-options writes granary/v1/options.proto, the file that a grain's
// .proto imports for Granary's options, exactly as the module that built
// the plugin has it. A module outside this repository puts it on its
// include path (for buf, in a directory of its buf.yaml), so it compiles
// its grain protos offline, with the options that the plugin it runs
// understands. -version prints the generator's version and the version of
// the Granary module it was built from: the module's version as the go
// command recorded it (a tag, or a pseudo-version for a commit), or
// "(devel) DIR" when a replace directive points the module at the
// directory DIR.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"google.golang.org/protobuf/compiler/protogen"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// version is written into the header of every generated file. Raise it
// when the generated code changes shape, so a reader can tell outputs of
// different generators apart.
const version = "v0.1.0"

// modulePath is the path of the module the plugin belongs to.
const modulePath = "github.com/granaryio/granary"

func main() {
	// protoc and buf run a plugin without arguments, and hand it the
	// request on stdin.
	if len(os.Args) > 1 {
		os.Exit(command(os.Args[1:], os.Stdout, os.Stderr))
	}
	protogen.Options{}.Run(generate)
}

// command runs the plugin as a command with the arguments args, writing to
// stdout and stderr, and returns its exit code: 0, or 1 when stdout cannot
// be written, or 2 for arguments it does not take.
func command(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("protoc-gen-go-granary", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: protoc-gen-go-granary -print-options | -version\n\n"+
			"protoc-gen-go-granary is a protoc plugin: protoc and buf run it with no arguments.\n"+
			"Run directly, it takes one of these flags:\n\n")
		fs.PrintDefaults()
	}
	printOptions := fs.Bool("print-options", false, "write granary/v1/options.proto, the file grain protos import, to stdout and exit")
	printVersion := fs.Bool("version", false, "print the generator's version and the Granary module's version, and exit")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "protoc-gen-go-granary: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	case *printOptions == *printVersion:
		fmt.Fprintln(stderr, "protoc-gen-go-granary: give exactly one of -print-options and -version")
		fs.Usage()
		return 2
	}
	var err error
	if *printOptions {
		_, err = io.WriteString(stdout, granaryv1.OptionsProto)
	} else {
		bi, _ := debug.ReadBuildInfo()
		_, err = fmt.Fprintf(stdout, "protoc-gen-go-granary %s, module %s %s\n", version, modulePath, moduleVersion(bi))
	}
	if err != nil {
		fmt.Fprintf(stderr, "protoc-gen-go-granary: %v\n", err)
		return 1
	}
	return 0
}

// moduleVersion returns the version of the Granary module recorded in bi,
// the build information of the running program:
//
//   - built as the main module, the version the go command stamped: a
//     tag or pseudo-version with go install ...@version or from a VCS
//     checkout, "(devel)" without either;
//   - built as a dependency, the required version, or the replacement's
//     version when a replace directive names one;
//   - replaced by a directory (a replace directive with a path and no
//     version), "(devel) " and that path: the required version is then a
//     placeholder such as v0.0.0-00010101000000-000000000000 that says
//     nothing of the code;
//   - "unknown" when bi is nil or does not name the module.
func moduleVersion(bi *debug.BuildInfo) string {
	if bi == nil {
		return "unknown"
	}
	if bi.Main.Path == modulePath {
		if bi.Main.Version == "" {
			return "(devel)"
		}
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path != modulePath {
			continue
		}
		switch {
		case d.Replace != nil && d.Replace.Version == "":
			return "(devel) " + d.Replace.Path
		case d.Replace != nil:
			return d.Replace.Version
		}
		return d.Version
	}
	return "unknown"
}
