package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the generator's output")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// protoRoot holds granary/v1/options.proto, which the test protos import.
const protoRoot = "../../proto"

// runPlugin compiles the .proto files (paths relative to testdata, or keys
// of inline, which take precedence) with their imports, builds the request
// that protoc or buf would send for them, and runs the plugin on it in
// process. It returns the plugin's response; the plugin's error, if any, is
// in the response's Error field, as protoc would see it.
func runPlugin(t *testing.T, inline map[string]string, files ...string) *pluginpb.CodeGeneratorResponse {
	t.Helper()
	compiler := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(protocompile.CompositeResolver{
			&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(inline)},
			&protocompile.SourceResolver{ImportPaths: []string{"testdata", protoRoot}},
		}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	compiled, err := compiler.Compile(context.Background(), files...)
	if err != nil {
		t.Fatalf("compile %v: %v", files, err)
	}

	// The request lists every file, dependencies first, as protoc does.
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: files,
		Parameter:      proto.String("paths=source_relative"),
	}
	seen := make(map[string]bool)
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		req.ProtoFile = append(req.ProtoFile, protodesc.ToFileDescriptorProto(fd))
	}
	for _, fd := range compiled {
		add(fd)
	}

	// Send the request through its wire form, so that the options reach
	// the plugin as they do from protoc.
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatalf("marshal request: %v", err)
	}
	req = new(pluginpb.CodeGeneratorRequest)
	if err := proto.Unmarshal(b, req); err != nil {
		t.Fatalf("unmarshal request: %v", err)
	}

	gen, err := protogen.Options{}.New(req)
	if err != nil {
		t.Fatalf("protogen: %v", err)
	}
	if err := generate(gen); err != nil {
		gen.Error(err)
	}
	return gen.Response()
}

// TestGolden checks the generated code of each testdata/X.proto against
// testdata/X.golden. Run with -update to rewrite the golden files.
func TestGolden(t *testing.T) {
	for _, name := range []string{"options", "imports", "observer"} {
		t.Run(name, func(t *testing.T) {
			resp := runPlugin(t, nil, name+".proto")
			if resp.Error != nil {
				t.Fatalf("plugin failed: %s", resp.GetError())
			}
			if len(resp.File) != 1 {
				t.Fatalf("plugin wrote %d files, want 1", len(resp.File))
			}
			f := resp.File[0]
			if want := name + "_granary.pb.go"; f.GetName() != want {
				t.Errorf("file name %q, want %q", f.GetName(), want)
			}
			got := []byte(f.GetContent())
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from %s (run go test -update to accept it):\n%s", golden, lineDiff(string(want), string(got)))
			}
		})
	}
}

// lineDiff returns the first lines at which want and got differ, for a
// failure message.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, wl, gl)
		}
	}
	return "(no line differs)"
}

// readFile returns the contents of the file at path.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNoServices checks that a file without services yields no output and
// no error.
func TestNoServices(t *testing.T) {
	resp := runPlugin(t, nil, "shared/shared.proto")
	if resp.Error != nil {
		t.Fatalf("plugin failed: %s", resp.GetError())
	}
	if len(resp.File) != 0 {
		t.Errorf("plugin wrote %d files for a file without services, want none", len(resp.File))
	}
}

// TestSupportedFeatures checks what the plugin tells protoc it supports.
func TestSupportedFeatures(t *testing.T) {
	resp := runPlugin(t, nil, "options.proto")
	want := uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL | pluginpb.CodeGeneratorResponse_FEATURE_SUPPORTS_EDITIONS)
	if got := resp.GetSupportedFeatures(); got != want {
		t.Errorf("supported features %b, want %b", got, want)
	}
	if got, want := resp.GetMaximumEdition(), int32(descriptorpb.Edition_EDITION_2023); got != want {
		t.Errorf("maximum edition %d, want %d", got, want)
	}
}
