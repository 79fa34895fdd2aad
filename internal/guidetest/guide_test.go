package guidetest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/proctest"
	"github.com/granaryio/granary/internal/testwait"
	"go.uber.org/goleak"
)

// A block is one fenced block of the guide.
type block struct {
	line int    // the line of its opening fence
	lang string // the info string's first word
	// file, from file=PATH: the block is that file's content.
	file string
	// background: the command keeps running while the next blocks run,
	// and ready is text its output shows once it serves.
	background bool
	ready      string
	// output: the block is what the command before it prints; each of
	// its lines must be a line of that output, word for word (linesMatch).
	output bool
	text   string
}

// parseGuide reads the fenced blocks of a Markdown file.
func parseGuide(t *testing.T, path string) []block {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks []block
		cur    *block
		body   strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !strings.HasPrefix(line, "```") {
			if cur != nil {
				body.WriteString(line)
				body.WriteByte('\n')
			}
			continue
		}
		if cur != nil {
			cur.text = body.String()
			blocks = append(blocks, *cur)
			cur = nil
			continue
		}
		words := strings.Fields(strings.TrimPrefix(line, "```"))
		cur = &block{line: n}
		body.Reset()
		for i, w := range words {
			switch k, v, _ := strings.Cut(w, "="); {
			case i == 0:
				cur.lang = w
			case k == "file":
				cur.file = v
			case w == "background":
				cur.background = true
			case k == "ready":
				cur.ready = strings.ReplaceAll(v, "_", " ")
			case w == "output":
				cur.output = true
			default:
				t.Fatalf("%s:%d: unknown fence attribute %q", path, n, w)
			}
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: block never closed", path, cur.line)
	}
	return blocks
}

// A substitution adapts one of the guide's commands to the test: the
// guide speaks to a user with a published Granary; the test has only this
// checkout and must not take the ports of other tests.
type substitution struct {
	old, new string
	used     bool
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestGuideCommandsBuildATestedGrain follows docs/guide.md from an empty
// directory outside the tree: it writes the guide's files, runs its
// commands in order (they generate code, run the grain's tests, start a
// silo and call it) and checks the output the guide shows. A command
// that fails, or output that differs, fails the test.
func TestGuideCommandsBuildATestedGrain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and its tools: not in -short")
	}
	needModuleProxy(t)
	root := moduleRoot(t)
	blocks := parseGuide(t, filepath.Join(root, "docs", "guide.md"))

	dir := t.TempDir()
	subs := []*substitution{
		{old: "go get github.com/granaryio/granary@latest", new: "go mod edit -require=github.com/granaryio/granary@v0.0.0-00010101000000-000000000000 -replace=github.com/granaryio/granary=" + root},
		// With the module replaced by the checkout, the proxy knows none
		// of its packages and refuses to say so with a 404, which alone
		// would let go get try the next candidate module path; the
		// modules they import still come from the proxy.
		{old: "go get -tool github.com/granaryio/", new: "GOPROXY='" + proxiesThenOff(t) + "' go get -tool github.com/granaryio/"},
		{old: "127.0.0.1:30000", new: freeAddr(t)},
	}
	env := append(os.Environ(), "GRANARY_ADMIN_LISTEN=")

	var (
		last    string // the output of the last command
		lastCmd block
	)
	for _, b := range blocks {
		switch {
		case b.file != "":
			p := filepath.Join(dir, b.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
		case b.output:
			printed := strings.Split(last, "\n")
			for _, want := range strings.Split(strings.TrimSpace(b.text), "\n") {
				if !slices.ContainsFunc(printed, func(line string) bool { return linesMatch(line, want) }) {
					t.Fatalf("guide.md:%d: the command at line %d printed\n%s\nwhich lacks the line the guide shows:\n%s", b.line, lastCmd.line, last, want)
				}
			}
		case b.lang == "sh":
			script := b.text
			for _, s := range subs {
				if strings.Contains(script, s.old) {
					script = strings.ReplaceAll(script, s.old, s.new)
					s.used = true
				}
			}
			if b.background {
				startBackground(t, b, dir, env, script)
				continue
			}
			start := time.Now()
			cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
			cmd.Dir, cmd.Env = dir, env
			out, err := cmd.CombinedOutput()
			t.Logf("guide.md:%d: %s(%v)", b.line, script, time.Since(start).Round(time.Millisecond))
			if err != nil {
				t.Fatalf("guide.md:%d: %s\n%s\n%v", b.line, script, out, err)
			}
			last, lastCmd = string(out), b
		}
	}
	for _, s := range subs {
		if !s.used {
			t.Errorf("no command of the guide contains %q, which the test substitutes: update the test with the guide", s.old)
		}
	}
}

// linesMatch reports whether the printed line is the guide's line want:
// the same words, compared whole, except that the printed line may end in
// one word more that go test adds and the guide leaves out, a duration
// ("0.737s") or "(cached)". So "total 5" matches neither "total 55" nor
// "total 5 more".
func linesMatch(line, want string) bool {
	got, w := strings.Fields(line), strings.Fields(want)
	if len(got) == len(w)+1 {
		if last := got[len(got)-1]; last == "(cached)" || isDuration(last) {
			got = got[:len(w)]
		}
	}
	return slices.Equal(got, w)
}

// isDuration reports whether s is a duration as go test prints one.
func isDuration(s string) bool {
	_, err := time.ParseDuration(s)
	return err == nil
}

// guideRequired names the environment variable that makes the guide's
// test fail, rather than skip, when the module proxy cannot serve it: CI
// sets it.
const guideRequired = "GRANARY_TEST_GUIDE_REQUIRED"

// needModuleProxy skips the test, or fails it when guideRequired is 1,
// unless the go command can fetch the modules the guide's commands
// download. It asks for buf's module, which the guide runs at a fixed
// version; once that is in the module cache the go command serves it from
// there, so the check passes offline too. GOPROXY=off fails it at once:
// the guide's go get commands look up the latest versions.
func needModuleProxy(t *testing.T) {
	t.Helper()
	const mod = "github.com/bufbuild/buf@v1.75.0"
	var msg string
	if os.Getenv("GOPROXY") == "off" {
		msg = "the guide's commands need the Go module proxy, and GOPROXY=off"
	} else {
		cmd := exec.Command("go", "mod", "download", "-json", mod)
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		if err == nil {
			return
		}
		msg = fmt.Sprintf("the guide's commands need the Go module proxy, and go mod download %s failed: %v\n%s", mod, err, out)
	}
	if os.Getenv(guideRequired) == "1" {
		t.Fatalf("%s\n(%s=1: the test must not skip)", msg, guideRequired)
	}
	t.Skipf("%s\n(set %s=1 to fail instead)", msg, guideRequired)
}

// startBackground starts a block's command, waits until its output shows
// the block's ready text, and stops it when the test ends.
func startBackground(t *testing.T, b block, dir string, env []string, script string) {
	t.Helper()
	if b.ready == "" {
		t.Fatalf("guide.md:%d: a background block needs ready=TEXT", b.line)
	}
	out := proctest.NewOutput()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	exited := false
	testwait.For(t, 5*time.Minute, fmt.Sprintf("guide.md:%d to print %q", b.line, b.ready), func() bool {
		select {
		case err := <-done:
			done <- err
			exited = true
			return true
		default:
		}
		return strings.Contains(out.String(), b.ready)
	})
	if exited {
		t.Fatalf("guide.md:%d: %s exited before printing %q:\n%s", b.line, script, b.ready, out)
	}
	t.Logf("guide.md:%d: %s(running)", b.line, script)
}

// proxiesThenOff is the go command's GOPROXY list with every proxy
// falling through to the next on any error ('|'), and "off" last in place
// of "direct", which cannot reach a module that exists only here.
func proxiesThenOff(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		t.Fatal(err)
	}
	var list []string
	for _, p := range strings.FieldsFunc(strings.TrimSpace(string(out)), func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "direct" && p != "off" {
			list = append(list, p)
		}
	}
	return strings.Join(append(list, "off"), "|")
}

// moduleRoot is the checkout's root: the nearest directory above the
// test's working directory that holds a go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

func TestLinesMatch(t *testing.T) {
	tests := []struct {
		line, want string
		ok         bool
	}{
		{"counter 42: total 5", "counter 42: total 5", true},
		{"  counter 42: total 5\r", "counter 42: total 5", true},
		{"counter 42: total 55", "counter 42: total 5", false},
		{"counter 42: total 5 more", "counter 42: total 5", false},
		{"xcounter 42: total 5", "counter 42: total 5", false},
		{"ok  \texample.com/counter/counter\t0.737s", "ok  \texample.com/counter/counter", true},
		{"ok  \texample.com/counter/counter\t(cached)", "ok  \texample.com/counter/counter", true},
		{"ok  \texample.com/counter/counter/sub\t0.737s", "ok  \texample.com/counter/counter", false},
	}
	for _, tt := range tests {
		if got := linesMatch(tt.line, tt.want); got != tt.ok {
			t.Errorf("linesMatch(%q, %q) = %v, want %v", tt.line, tt.want, got, tt.ok)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
