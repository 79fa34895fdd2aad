package silo

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/pgtest"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/pgstore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The shape of the linearizability check's workload.
const (
	linClients   = 6   // concurrent clients
	linKeysOnB   = 2   // registers whose activation is on the silo killed
	linKeysElse  = 1   // registers whose activation is on a survivor
	linBeforeB   = 120 // operations completed, in all, before b is killed
	linAfterKill = 40  // operations each client starts after the kill...
	// ...and for how long after it they go on: past the directory's
	// recovery window (500ms by default), when the silos re-register
	// the activations whose entries were on b.
	linAfterKillFor = time.Second
	linOpTimeout    = defaultTestTimeout / 2
)

func TestLinearizableRegisterMemory(t *testing.T) {
	checkLinearizable(t, storage.NewMemory(0))
}

func TestLinearizableRegisterPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := testCtx(t)
	st, err := pgstore.Open(ctx, pgstore.Config{DSN: dsn, ServiceID: pgtest.ServiceID(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close) // registered first, so it runs after the cluster stops
	checkLinearizable(t, st)
}

// regInput is a register operation of the history: a read of key, or a
// write of value to it.
type regInput struct {
	key   string
	write bool
	value int64
}

// regOutput is what an operation returned: the value read, or nothing for
// a write. A write whose outcome is unknown has ok false.
type regOutput struct {
	ok    bool
	value int64
	silo  string // where the activation that answered ran
}

// registerModel is a register per key, each starting at 0: a write sets
// it, and a read returns it. Keys are checked independently.
var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(regInput).key
			byKey[k] = append(byKey[k], op)
		}
		var ps [][]porcupine.Operation
		for _, k := range sortedKeys(byKey) {
			ps = append(ps, byKey[k])
		}
		return ps
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.write {
			return true, in.value
		}
		return output.(regOutput).value == state.(int64), state
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch {
		case !in.write:
			return fmt.Sprintf("get(%s) -> %d @%s", in.key, out.value, out.silo)
		case out.ok:
			return fmt.Sprintf("set(%s, %d) @%s", in.key, in.value, out.silo)
		default:
			return fmt.Sprintf("set(%s, %d) -> ?", in.key, in.value)
		}
	},
	DescribeState: func(state any) string { return fmt.Sprint(state) },
}

// linHistory records the operations of a run, with times from one
// monotonic clock.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	errs  map[codes.Code]int // failed operations, by code
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

// get reads key through via and records the read if it succeeded: a
// failed read has no effect, so it is left out.
func (h *linHistory) get(ctx context.Context, client int, via grain.Caller, key string) (*probe.RegisterReply, error) {
	ctx, cancel := context.WithTimeout(ctx, linOpTimeout)
	defer cancel()
	call := h.now()
	r, err := reg(via, key).Get(ctx, &probe.RegisterOp{})
	ret := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.errs[status.Code(err)]++
		return nil, err
	}
	h.ops = append(h.ops, porcupine.Operation{
		ClientId: client, Input: regInput{key: key}, Call: call,
		Output: regOutput{ok: true, value: r.Value, silo: r.Silo}, Return: ret,
	})
	return r, nil
}

// set writes value to key through via and records the write. One that
// failed with FailedPrecondition lost to another activation's and was not
// stored, so it is left out; one that failed otherwise may or may not
// have been stored, so it is kept with no return: it may take effect at
// any time after its call, or never.
func (h *linHistory) set(ctx context.Context, client int, via grain.Caller, key string, value int64) (*probe.RegisterReply, error) {
	ctx, cancel := context.WithTimeout(ctx, linOpTimeout)
	defer cancel()
	call := h.now()
	r, err := reg(via, key).Set(ctx, &probe.RegisterOp{Value: value})
	ret := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	op := porcupine.Operation{ClientId: client, Input: regInput{key: key, write: true, value: value}, Call: call, Return: ret}
	switch {
	case err == nil:
		op.Output = regOutput{ok: true, silo: r.Silo}
	case status.Code(err) == codes.FailedPrecondition:
		h.errs[codes.FailedPrecondition]++
		return nil, err
	default:
		h.errs[status.Code(err)]++
		op.Output, op.Return = regOutput{}, math.MaxInt64
	}
	h.ops = append(h.ops, op)
	return r, err
}

// checkLinearizable runs concurrent clients reading and writing a few
// Register grains of a three-silo cluster over provider, kills silo b
// (which hosts some of the registers) while they run, and checks the
// history: it must be linearizable, and no acknowledged write lost.
func checkLinearizable(t *testing.T, provider storage.Provider) {
	w := newRegisterWorld()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{
		tweak:    func(c *Config) { c.Storage = map[string]storage.Provider{grain.DefaultStorage: provider} },
		register: func(s *Silo, name string) { w.register(t, s, name) },
	})
	ctx := testCtx(t)
	h := &linHistory{start: time.Now(), errs: map[codes.Code]int{}}
	// The clients call through the survivors only, so that none is killed.
	vias := []*Silo{tc.silo("a"), tc.silo("c")}
	setup := linClients     // the client ID of the test's own operations
	var values atomic.Int64 // every write writes a value of its own

	// Registers: the first write of each activates it where placement
	// says; keep some on b, and some elsewhere.
	var keys []string
	onB, elsewhere := 0, 0
	for i := 0; onB < linKeysOnB || elsewhere < linKeysElse; i++ {
		if i == 100 {
			t.Fatalf("fewer than %d of 100 registers placed on b", linKeysOnB)
		}
		key := fmt.Sprintf("lin%d", i)
		r, err := h.set(ctx, setup, vias[i%2], key, values.Add(1))
		if err != nil {
			t.Fatalf("first write of %s: %v", key, err)
		}
		switch {
		case r.Silo == "b" && onB < linKeysOnB:
			onB++
		case r.Silo != "b" && elsewhere < linKeysElse:
			elsewhere++
		default:
			continue
		}
		keys = append(keys, key)
		t.Logf("register %s is on %s", key, r.Silo)
	}
	h.mu.Lock()
	h.ops = slices.DeleteFunc(h.ops, func(op porcupine.Operation) bool {
		return !slices.Contains(keys, op.Input.(regInput).key)
	})
	h.mu.Unlock()

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var (
		done     atomic.Int64 // operations completed by the clients
		killed   atomic.Bool  // b is gone: set once kill returned
		killNow  = make(chan struct{})
		signal   sync.Once
		wg       sync.WaitGroup
		killedAt atomic.Int64 // h.now() when kill returned
	)
	for c := range linClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			via := vias[c%len(vias)]
			after := 0 // operations started after the kill
			for ctx.Err() == nil {
				if killed.Load() {
					if after >= linAfterKill && h.now()-killedAt.Load() >= int64(linAfterKillFor) {
						return
					}
					after++
				}
				key := keys[rng.IntN(len(keys))]
				if rng.IntN(2) == 0 {
					h.get(ctx, c, via, key)
				} else {
					h.set(ctx, c, via, key, values.Add(1))
				}
				if done.Add(1) >= linBeforeB {
					signal.Do(func() { close(killNow) })
				}
			}
		}()
	}
	select {
	case <-killNow:
		tc.kill("b")
		killedAt.Store(h.now())
		killed.Store(true)
	case <-ctx.Done():
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the clients did not finish in %v", defaultTestTimeout)
	}

	// The final reads, through each survivor, are part of the history.
	final := map[string][]int64{} // by key, through a and c
	for _, key := range keys {
		for _, via := range vias {
			for {
				r, err := h.get(ctx, setup, via, key)
				if err == nil {
					final[key] = append(final[key], r.Value)
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("final read of %s through %s: %v", key, via.cfg.Name, err)
				}
			}
		}
	}

	h.mu.Lock()
	ops := slices.Clone(h.ops)
	errs := h.errs
	h.mu.Unlock()
	t.Logf("%d operations recorded in %v; b killed at %v; failed operations by code: %v",
		len(ops), time.Duration(h.now()), time.Duration(killedAt.Load()), errs)

	res, info := porcupine.CheckOperationsVerbose(registerModel, ops, time.Minute)
	if res != porcupine.Ok {
		reportNonLinearizable(t, ops, keys, info)
		t.Fatalf("the history is not linearizable: porcupine says %s", res)
	}

	// No acknowledged write was lost: the value each register ends with
	// was written by a write that no acknowledged write followed.
	for _, key := range keys {
		kops := opsOf(ops, key)
		for _, v := range final[key] {
			var from *porcupine.Operation
			for i, op := range kops {
				if in := op.Input.(regInput); in.write && in.value == v {
					from = &kops[i]
				}
			}
			if from == nil {
				t.Fatalf("%s ends with %d, which no write wrote", key, v)
			}
			for _, op := range kops {
				if in := op.Input.(regInput); in.write && op.Output.(regOutput).ok && op.Call > from.Return {
					t.Fatalf("%s ends with %d, written in [%v, %v]; the acknowledged write of %d after it, in [%v, %v], was lost",
						key, v, time.Duration(from.Call), time.Duration(from.Return), in.value, time.Duration(op.Call), time.Duration(op.Return))
				}
			}
		}
	}

	// The kill was covered: the registers on b were written and read
	// after it, which took new activations on the survivors.
	for _, key := range keys {
		var wrote, read bool
		for _, op := range opsOf(ops, key) {
			if op.Call <= killedAt.Load() || op.ClientId == setup {
				continue
			}
			out := op.Output.(regOutput)
			if op.Input.(regInput).write {
				wrote = wrote || out.ok
			} else {
				read = true
			}
		}
		if !wrote || !read {
			t.Fatalf("%s: acknowledged write after the kill %v, read %v; the test did not cover the kill", key, wrote, read)
		}
	}
}

// reportNonLinearizable logs where the history of each register that is
// not linearizable could go no further, and writes porcupine's
// visualization of the whole history and each such register's history,
// as text, to a directory that outlives the test.
func reportNonLinearizable(t *testing.T, ops []porcupine.Operation, keys []string, info porcupine.LinearizationInfo) {
	t.Helper()
	dir, err := os.MkdirTemp("", "granary-linearizability-")
	if err != nil {
		t.Logf("no directory for the history: %v", err)
		dir = ""
	}
	if dir != "" {
		path := filepath.Join(dir, "history.html")
		if err := porcupine.VisualizePath(registerModel, info, path); err != nil {
			t.Logf("visualization: %v", err)
		} else {
			t.Logf("visualization: %s", path)
		}
	}
	for _, key := range keys {
		kops := opsOf(ops, key)
		res, kinfo := porcupine.CheckOperationsVerbose(registerModel, kops, time.Minute)
		if res == porcupine.Ok {
			continue
		}
		var longest []porcupine.Operation
		for _, p := range kinfo.PartialLinearizationsOperations() {
			for _, l := range p {
				if len(l) > len(longest) {
					longest = l
				}
			}
		}
		tail := longest[max(0, len(longest)-20):]
		t.Logf("%s (%s): the longest linearization of its %d operations takes %d; its last ones, in that order:\n%s",
			key, res, len(kops), len(longest), describeOps(tail))
		if dir != "" {
			path := filepath.Join(dir, key+".txt")
			slices.SortFunc(kops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
			if err := os.WriteFile(path, []byte(describeOps(kops)), 0o644); err == nil {
				t.Logf("history of %s: %s", key, path)
			}
		}
	}
}

// opsOf returns the operations on key.
func opsOf(ops []porcupine.Operation, key string) []porcupine.Operation {
	var kops []porcupine.Operation
	for _, op := range ops {
		if op.Input.(regInput).key == key {
			kops = append(kops, op)
		}
	}
	return kops
}

// describeOps renders operations, in their order, for a failure message.
func describeOps(ops []porcupine.Operation) string {
	var b strings.Builder
	for _, op := range ops {
		ret := "?"
		if op.Return != math.MaxInt64 {
			ret = time.Duration(op.Return).String()
		}
		fmt.Fprintf(&b, "\tclient %d [%v, %s] %s\n", op.ClientId, time.Duration(op.Call), ret,
			registerModel.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}
