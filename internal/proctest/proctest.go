// Package proctest helps the tests that run an example as processes: it
// builds the program once per test binary, collects what a process
// prints so a test can wait for a line, and parses the key=value words of
// such lines. It also finds the outside clients that tests drive, grpcurl
// (Grpcurl) and Python's gRPC (Python), skipping a test without them.
package proctest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Program is the program of the package under test, built once by Build
// into a directory that Remove deletes (call it from TestMain).
type Program struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// Build builds the package in the test's working directory (the package
// under test) as name, once per Program, within ctx, and returns the
// binary's path. The go command is the one running the tests: go test
// puts its GOROOT/bin first on PATH.
func (p *Program) Build(ctx context.Context, t testing.TB, name string) string {
	t.Helper()
	p.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			p.err = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		if p.dir, err = os.MkdirTemp("", "granary-"+name+"-test-"); err != nil {
			p.err = err
			return
		}
		p.bin = filepath.Join(p.dir, name)
		out, err := exec.CommandContext(ctx, goTool, "build", "-o", p.bin, ".").CombinedOutput()
		if err != nil {
			p.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.bin
}

// Remove deletes what Build made.
func (p *Program) Remove() {
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

var clusterSeq atomic.Int64

// ClusterID returns a cluster ID no other test run shares, so silos of
// concurrent runs on one machine never join each other.
func ClusterID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), clusterSeq.Add(1))
}

// Output collects the lines a process writes, for a test to wait on.
// Write and the other methods may be called from any goroutine.
type Output struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	grew    chan struct{} // closed and replaced when a line arrives
}

// NewOutput returns an empty Output.
func NewOutput() *Output { return &Output{grew: make(chan struct{})} }

// Write takes what the process printed; each complete line is kept.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		o.lines = append(o.lines, string(o.partial[:i]))
		o.partial = o.partial[i+1:]
		close(o.grew)
		o.grew = make(chan struct{})
	}
	return len(p), nil
}

// WaitLine returns the first line from index skip on that starts with
// prefix, and its index, or fails when ctx ends or done is closed (the
// process exited) first.
func (o *Output) WaitLine(ctx context.Context, done <-chan struct{}, prefix string, skip int) (string, int, error) {
	for {
		o.mu.Lock()
		for i := skip; i < len(o.lines); i++ {
			if line := o.lines[i]; strings.HasPrefix(line, prefix) {
				o.mu.Unlock() // read under the lock: Write may grow lines
				return line, i, nil
			}
		}
		skip = len(o.lines)
		grew := o.grew
		o.mu.Unlock()
		select {
		case <-grew:
		case <-done:
			done = nil // look once more: the line may have come last
			if o.Has(prefix, skip) {
				continue
			}
			return "", 0, fmt.Errorf("the program exited without printing a %q line", prefix)
		case <-ctx.Done():
			return "", 0, fmt.Errorf("no %q line: %w", prefix, ctx.Err())
		}
	}
}

// String returns every line so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.lines, "\n")
}

// Has reports whether a line from index skip on starts with prefix.
func (o *Output) Has(prefix string, skip int) bool {
	return len(o.Lines(prefix, skip)) > 0
}

// Lines returns the lines from index skip on that start with prefix.
func (o *Output) Lines(prefix string, skip int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, l := range o.lines[min(skip, len(o.lines)):] {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// Fields parses the key=value words of a line such as
// "ready member=a-1 grpc=127.0.0.1:1 gossip=127.0.0.1:2".
func Fields(line string) map[string]string {
	f := map[string]string{}
	for _, w := range strings.Fields(line) {
		if k, v, ok := strings.Cut(w, "="); ok {
			f[k] = v
		}
	}
	return f
}

// Child is a running process of the program under test.
type Child struct {
	Name string
	Cmd  *exec.Cmd
	// Stdin is a pipe to the process's standard input, when Start was
	// asked for one.
	Stdin io.WriteCloser
	Out   *Output       // what it printed on stdout
	Done  chan struct{} // closed when it exited
	// ExitErr is Cmd.Wait's error, set before Done is closed.
	ExitErr error
	// Stderr is the file its standard error goes to.
	Stderr string
}

// Start starts bin with args as the child called name, with a pipe on its
// stdin if withStdin, and its stderr in a file of the test's temporary
// directory. t.Cleanup kills it if it still runs and, if the test failed,
// logs its stdout and what logs makes of its stderr file.
func Start(t testing.TB, bin, name string, withStdin bool, logs func(stderr string) string, args ...string) *Child {
	t.Helper()
	stderr, err := os.Create(filepath.Join(t.TempDir(), name+".stderr"))
	if err != nil {
		t.Fatal(err)
	}
	c := &Child{Name: name, Out: NewOutput(), Done: make(chan struct{}), Stderr: stderr.Name()}
	c.Cmd = exec.Command(bin, args...)
	c.Cmd.Stdout, c.Cmd.Stderr = c.Out, stderr
	if withStdin {
		if c.Stdin, err = c.Cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.ExitErr = c.Cmd.Wait()
		close(c.Done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.Done:
		default:
			_ = c.Cmd.Process.Kill()
			<-c.Done
		}
		if t.Failed() {
			t.Logf("%s: stdout:\n%s\nstderr:\n%s", name, c.Out, logs(stderr.Name()))
		}
		_ = stderr.Close()
	})
	return c
}

// WaitExit waits, until ctx ends, for the child to exit, which must be
// with status 0 and after a line starting with last.
func (c *Child) WaitExit(ctx context.Context, last string) error {
	select {
	case <-c.Done:
	case <-ctx.Done():
		return fmt.Errorf("%s did not exit: %w", c.Name, ctx.Err())
	}
	if c.ExitErr != nil {
		return fmt.Errorf("%s exited: %v", c.Name, c.ExitErr)
	}
	if !c.Out.Has(last, 0) {
		return fmt.Errorf("%s exited without a %q line", c.Name, last)
	}
	return nil
}

// LastLines returns the last n lines of the file at path.
func LastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
