package guidetest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	// its lines must appear in that output.
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
	if os.Getenv("GOPROXY") == "off" {
		t.Skip("the guide's module needs the Go module proxy; GOPROXY=off")
	}
	root := moduleRoot(t)
	blocks := parseGuide(t, filepath.Join(root, "docs", "guide.md"))

	dir := t.TempDir()
	gobin := filepath.Join(dir, ".gobin")
	subs := []*substitution{
		{old: "go get github.com/granaryio/granary@latest", new: "go mod edit -require=github.com/granaryio/granary@v0.0.0-00010101000000-000000000000 -replace=github.com/granaryio/granary=" + root},
		// With the module replaced by the checkout, the proxy knows none
		// of its packages: resolve them offline.
		{old: "go get -tool github.com/granaryio/", new: "GOPROXY=off go get -tool github.com/granaryio/"},
		{old: "127.0.0.1:30000", new: freeAddr(t)},
	}
	env := append(os.Environ(),
		"GOBIN="+gobin,
		"PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GRANARY_ADMIN_LISTEN=",
	)

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
			for _, want := range strings.Split(strings.TrimSpace(b.text), "\n") {
				if !strings.Contains(last, strings.TrimSpace(want)) {
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

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
