package main

import (
	"bytes"
	"errors"
	"runtime/debug"
	"strings"
	"testing"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// TestPrintedOptionsCompile: -print-options writes the options.proto that
// the plugin was built with (granaryv1.OptionsProto) and nothing else, and
// the printed file compiles as the import of a grain proto, from an
// include path that holds nothing else of Granary's.
func TestPrintedOptionsCompile(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := command([]string{"-print-options"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, stderr.String())
	}
	if stdout.String() != granaryv1.OptionsProto {
		t.Errorf("-print-options differs from granaryv1.OptionsProto:\n%s", lineDiff(granaryv1.OptionsProto, stdout.String()))
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q, want nothing", stderr.String())
	}
	src := badHeader + `service S { option (granary.v1.grain) = {key_kind: KEY_KIND_INT64_COMPOUND, keep_alive: true}; rpc M(Req) returns (Resp); }` + "\n"
	resp := runPlugin(t, map[string]string{"bad.proto": src, "granary/v1/options.proto": stdout.String()}, "bad.proto")
	if resp.Error != nil {
		t.Fatalf("plugin failed: %s", resp.GetError())
	}
	if len(resp.File) != 1 || !strings.Contains(resp.File[0].GetContent(), "KeyKind:   grain.KeyInt64Compound,") {
		t.Errorf("plugin wrote %d files, want one with KeyKind grain.KeyInt64Compound", len(resp.File))
	}
}

// TestVersionNamesGeneratorAndModule: -version prints one line with the
// generator's version and the module's. The flag package reads --version
// as -version, so both spellings work.
func TestVersionNamesGeneratorAndModule(t *testing.T) {
	for _, arg := range []string{"-version", "--version"} {
		var stdout, stderr bytes.Buffer
		if code := command([]string{arg}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit code %d, stderr %q", arg, code, stderr.String())
		}
		want := "protoc-gen-go-granary " + version + ", module " + modulePath + " "
		if got := stdout.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") != 1 {
			t.Errorf("%s printed %q, want one line beginning %q", arg, got, want)
		}
	}
}

// TestModuleVersion: the module's version is read from the build
// information as the plugin is built: as the main module, as a required
// module, or replaced by a directory or by another version.
func TestModuleVersion(t *testing.T) {
	const pseudo = "v0.0.0-20260101000000-0123456789ab"
	dep := func(version string, replace *debug.Module) *debug.BuildInfo {
		return &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/counter", Version: "(devel)"},
			Deps: []*debug.Module{
				{Path: "google.golang.org/protobuf", Version: "v1.36.0"},
				{Path: modulePath, Version: version, Replace: replace},
			},
		}
	}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build information", nil, "unknown"},
		{"main module, tagged", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.2.0"}}, "v0.2.0"},
		{"main module, VCS checkout", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: pseudo}}, pseudo},
		{"main module, no VCS", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "(devel)"},
		{"main module, no version", &debug.BuildInfo{Main: debug.Module{Path: modulePath}}, "(devel)"},
		{"required module", dep("v0.2.0", nil), "v0.2.0"},
		{"directory replace", dep("v0.0.0-00010101000000-000000000000", &debug.Module{Path: "../granary"}), "(devel) ../granary"},
		{"versioned replace", dep("v0.2.0", &debug.Module{Path: "example.com/fork/granary", Version: "v0.2.1"}), "v0.2.1"},
		{"module absent", &debug.BuildInfo{Main: debug.Module{Path: "example.com/other"}}, "unknown"},
	}
	for _, tt := range tests {
		if got := moduleVersion(tt.bi); got != tt.want {
			t.Errorf("%s: moduleVersion = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestCommandRefusesBadArguments: arguments other than one flag it knows
// exit with code 2 and a usage message, and write nothing to stdout.
func TestCommandRefusesBadArguments(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"-print-options", "-version"}, "give exactly one of -print-options and -version"},
		{[]string{"-version=false"}, "give exactly one of"},
		{[]string{"-print-options", "extra"}, `unexpected argument "extra"`},
		{[]string{"paths=source_relative"}, `unexpected argument "paths=source_relative"`},
		{[]string{"-frobnicate"}, "flag provided but not defined: -frobnicate"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if code := command(tt.args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit code %d, want 2", tt.args, code)
		}
		if stdout.Len() != 0 {
			t.Errorf("%q: stdout %q, want nothing", tt.args, stdout.String())
		}
		if got := stderr.String(); !strings.Contains(got, tt.want) || !strings.Contains(got, "usage: protoc-gen-go-granary") {
			t.Errorf("%q: stderr %q, want %q and the usage", tt.args, got, tt.want)
		}
	}
}

// TestCommandReportsAFailedWrite: a stdout that cannot be written to
// (a closed pipe) exits with code 1 and says why.
func TestCommandReportsAFailedWrite(t *testing.T) {
	var stderr bytes.Buffer
	if code := command([]string{"-print-options"}, failingWriter{}, &stderr); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "protoc-gen-go-granary: broken pipe") {
		t.Errorf("stderr %q, want the write error", stderr.String())
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }
