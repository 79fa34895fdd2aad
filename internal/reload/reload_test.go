package reload_test

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/reload"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// file is contents a test changes, and an error to read them with.
type file struct {
	mu   sync.Mutex
	data string
	err  error
}

func (f *file) set(data string, err error) {
	f.mu.Lock()
	f.data, f.err = data, err
	f.mu.Unlock()
}

func (f *file) read() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return []byte(f.data), nil
}

func TestValueFollowsItsFilesAtMostOncePerInterval(t *testing.T) {
	clock := clockwork.NewFakeClock()
	core, logs := observer.New(zap.InfoLevel)
	f := &file{data: "1"}
	v, err := reload.New(reload.Options[int]{
		Read: f.read, Parse: func(raw []byte) (int, error) { return strconv.Atoi(string(raw)) },
		Interval: time.Second, Clock: clock, Logger: zap.New(core), Failed: "failed", Loaded: "loaded",
	})
	if err != nil {
		t.Fatal(err)
	}
	f.set("2", nil)
	if got := v.Get(); got != 1 {
		t.Fatalf("Get before the interval = %d, want 1", got)
	}
	clock.Advance(time.Second)
	if got := v.Get(); got != 2 {
		t.Fatalf("Get after the interval = %d, want 2", got)
	}
	// A change that does not parse, then a missing file: each logged
	// once, the value kept.
	f.set("x", nil)
	for range 3 {
		if v.Check() == nil {
			t.Fatal("a change that does not parse was taken")
		}
	}
	f.set("", errors.New("gone"))
	for range 3 {
		_ = v.Check()
	}
	if got := v.Get(); got != 2 {
		t.Errorf("Get after refused changes = %d, want 2", got)
	}
	if n := logs.FilterMessage("failed").Len(); n != 2 {
		t.Errorf("%d warnings for two refused states, want 2", n)
	}
	if n := logs.FilterMessage("loaded").Len(); n != 1 {
		t.Errorf("%d loads logged, want 1", n)
	}
	if _, err := reload.New(reload.Options[int]{Read: (&file{data: "x"}).read, Parse: func(raw []byte) (int, error) { return strconv.Atoi(string(raw)) }}); err == nil {
		t.Error("New took files that do not parse")
	}
}
