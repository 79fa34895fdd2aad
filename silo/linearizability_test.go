package silo

import (
	"cmp"
	"context"
	"fmt"
	"maps"
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
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/pgstore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The linearizability checks record the operations of concurrent clients
// on a few Register grains and check with porcupine that the history is
// that of one register per key. Two runs, each over a provider:
//
//   - runKillAndChurn: single activations. Silo b of three is killed while
//     clients read and write, and a churn deactivates the registers every
//     few milliseconds, so that reads keep coming from fresh activations,
//     which read the store: an acknowledged write the store lost shows as
//     a stale read. Gets answer from the activation's memory, so this also
//     checks that a register never has two activations at once.
//   - runDuplicates: several activations of one register at once (a
//     stateless worker), racing to write the same record: only the store's
//     ETag check keeps them apart.

// The shape of the kill-and-churn run.
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
	// linChurnEvery paces the churn: each tick deactivates one register's
	// activations on the survivors.
	linChurnEvery = 3 * time.Millisecond
	// linMinActivations is how many activations each register must have
	// had, at least, for the run to count: the churn's reach.
	linMinActivations = 5
	linOpTimeout      = defaultTestTimeout / 2
)

// The shape of the duplicates run.
const (
	linDupWorkers = 3                      // activations of a register at once, at most
	linDupKeys    = 2                      // registers
	linDupOps     = 100                    // operations each client makes, at least...
	linDupFor     = 500 * time.Millisecond // ...and for how long, at least
)

func TestLinearizableRegisterMemory(t *testing.T) {
	t.Parallel()
	requireLinearizable(t, runKillAndChurn(t, storage.NewMemory(0)))
}

func TestLinearizableRegisterPostgres(t *testing.T) {
	t.Parallel()
	requireLinearizable(t, runKillAndChurn(t, openTestPgStore(t)))
}

func TestLinearizableRegisterDuplicatesMemory(t *testing.T) {
	t.Parallel()
	requireFencedLinearizable(t, runDuplicates(t, storage.NewMemory(0)))
}

func TestLinearizableRegisterDuplicatesPostgres(t *testing.T) {
	t.Parallel()
	requireFencedLinearizable(t, runDuplicates(t, openTestPgStore(t)))
}

// openTestPgStore opens a store on the test server, closed after
// everything the test starts next has stopped.
func openTestPgStore(t *testing.T) *pgstore.Store {
	t.Helper()
	dsn := pgtest.DSN(t)
	st, err := pgstore.Open(testCtx(t), pgstore.Config{DSN: dsn, ServiceID: pgtest.ServiceID(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close) // registered first, so it runs after the silos stop
	return st
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
	act   uint64 // and which it was
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
		for _, k := range slices.Sorted(maps.Keys(byKey)) {
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
			return fmt.Sprintf("get(%s) -> %d @%s#%d", in.key, out.value, out.silo, out.act)
		case out.ok:
			return fmt.Sprintf("set(%s, %d) @%s#%d", in.key, in.value, out.silo, out.act)
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
	// examples holds the first few failures of each code.
	examples map[codes.Code][]error
}

func newLinHistory() *linHistory {
	return &linHistory{start: time.Now(), errs: map[codes.Code]int{}, examples: map[codes.Code][]error{}}
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

// failed counts a failed operation. h.mu held.
func (h *linHistory) failed(err error) {
	c := status.Code(err)
	h.errs[c]++
	if len(h.examples[c]) < 3 {
		h.examples[c] = append(h.examples[c], err)
	}
}

// get reads key through via and records the read if it succeeded: a
// failed read has no effect, so it is left out. (A fenced read that
// failed may have written the value back: that changes nothing either.)
func (h *linHistory) get(ctx context.Context, client int, via grain.Caller, key string) (*probe.RegisterReply, error) {
	ctx, cancel := context.WithTimeout(ctx, linOpTimeout)
	defer cancel()
	call := h.now()
	r, err := reg(via, key).Get(ctx, &probe.RegisterOp{})
	ret := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.failed(err)
		return nil, err
	}
	h.ops = append(h.ops, porcupine.Operation{
		ClientId: client, Input: regInput{key: key}, Call: call,
		Output: regOutput{ok: true, value: r.Value, silo: r.Silo, act: r.Activation}, Return: ret,
	})
	return r, nil
}

// set writes value to key through via and records the write. One that
// failed with FailedPrecondition lost to another activation's and was not
// stored, so it is left out; one that failed otherwise may or may not
// have been stored, so it is kept with no return: it may take effect at
// any time after its call, or never (but see check).
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
		op.Output = regOutput{ok: true, silo: r.Silo, act: r.Activation}
	case status.Code(err) == codes.FailedPrecondition:
		h.failed(err)
		return nil, err
	default:
		h.failed(err)
		op.Output, op.Return = regOutput{}, math.MaxInt64
	}
	h.ops = append(h.ops, op)
	return r, err
}

// linRun is the history of a run and porcupine's verdict on it.
type linRun struct {
	ops  []porcupine.Operation
	keys []string
	errs map[codes.Code]int // failed operations, by code
	res  porcupine.CheckResult
	info porcupine.LinearizationInfo
}

// check checks the operations on keys recorded so far, once the clients
// have stopped. A write of unknown outcome whose value the store was
// never handed had no effect, and is left out: a Set that fails puts
// the activation's value back, and a call that never reached the grain
// did nothing. (A call still on its way could write later, but after
// every operation of the history.) Each write of unknown outcome kept
// doubles the linearizations porcupine may have to try; the calls that
// fail fast while the cluster changes, a burst of them, never reach a
// grain.
func (h *linHistory) check(t *testing.T, keys []string, store *writeLog) linRun {
	t.Helper()
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	errs := maps.Clone(h.errs)
	examples := maps.Clone(h.examples)
	h.mu.Unlock()
	unknown, dropped := 0, 0
	ops = slices.DeleteFunc(ops, func(op porcupine.Operation) bool {
		in := op.Input.(regInput)
		if !slices.Contains(keys, in.key) {
			return true
		}
		if !in.write || op.Output.(regOutput).ok {
			return false
		}
		unknown++
		if !store.handed(in.value) {
			dropped++
			return true
		}
		return false
	})
	res, info := porcupine.CheckOperationsVerbose(registerModel, ops, time.Minute)
	t.Logf("%d operations recorded in %v; failed operations by code: %v; %d writes of unknown outcome, %d of them never handed to the store; porcupine says %s",
		len(ops), time.Duration(h.now()), errs, unknown, dropped, res)
	for _, c := range sortedCodes(examples) {
		for _, err := range examples[c] {
			t.Logf("\t%v", err)
		}
	}
	return linRun{ops: ops, keys: keys, errs: errs, res: res, info: info}
}

// sortedCodes returns m's codes in order.
func sortedCodes[V any](m map[codes.Code]V) []codes.Code {
	cs := slices.Collect(maps.Keys(m))
	slices.Sort(cs)
	return cs
}

// writeLog is a provider that notes each register value it is handed to
// write, whatever comes of the write.
type writeLog struct {
	storage.Provider
	mu     sync.Mutex
	values map[int64]bool
}

func newWriteLog(p storage.Provider) *writeLog {
	return &writeLog{Provider: p, values: map[int64]bool{}}
}

func (l *writeLog) WriteState(ctx context.Context, id grain.ID, name string, data []byte, etag string) (string, error) {
	var st probe.RegisterState
	if err := proto.Unmarshal(data, &st); err == nil {
		l.mu.Lock()
		l.values[st.Value] = true
		l.mu.Unlock()
	}
	return l.Provider.WriteState(ctx, id, name, data, etag)
}

// handed reports whether the store was handed value to write.
func (l *writeLog) handed(value int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.values[value]
}

// requireLinearizable fails t unless porcupine found r's history
// linearizable.
func requireLinearizable(t *testing.T, r linRun) {
	t.Helper()
	if r.res != porcupine.Ok {
		reportNonLinearizable(t, r.ops, r.keys, r.info)
		t.Fatalf("the history is not linearizable: porcupine says %s", r.res)
	}
}

// requireFencedLinearizable is requireLinearizable for a duplicates run,
// which also needs the fencing to have been exercised: some activation's
// write lost a race to another's.
func requireFencedLinearizable(t *testing.T, r linRun) {
	t.Helper()
	requireLinearizable(t, r)
	if r.errs[codes.FailedPrecondition] == 0 {
		t.Fatal("no operation failed with FailedPrecondition: no activation lost a race to another, so the run did not exercise the store's fencing")
	}
}

// churn deactivates, every linChurnEvery until stop is closed, one of
// keys' activations on every silo of ss, without waiting for them to go:
// the next call to the register activates it afresh, and that activation
// reads the store. It returns how many deactivations it asked for.
func churn(ss []*Silo, keys []string, seed uint64, stop <-chan struct{}) int {
	rng := rand.New(rand.NewPCG(seed, math.MaxUint64))
	tick := time.NewTicker(linChurnEvery)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-tick.C:
		}
		id := grain.NewID(probe.RegisterGrainType, keys[rng.IntN(len(keys))])
		for _, s := range ss {
			if ok, _ := s.Deactivate(context.Background(), id); ok {
				n++
			}
		}
	}
}

// deactivateAll deactivates keys' activations on every silo of ss, and
// waits until they are gone.
func deactivateAll(t *testing.T, ss []*Silo, keys []string) {
	t.Helper()
	for _, s := range ss {
		for _, key := range keys {
			if _, err := s.Deactivate(testCtx(t), grain.NewID(probe.RegisterGrainType, key)); err != nil {
				t.Fatal(err)
			}
		}
	}
	testwait.For(t, defaultTestTimeout, "the registers to deactivate", func() bool {
		for _, s := range ss {
			for _, key := range keys {
				if localActivation(s, probe.RegisterGrainType, key) != nil {
					return false
				}
			}
		}
		return true
	})
}

// runKillAndChurn runs concurrent clients reading and writing a few
// Register grains of a three-silo cluster over provider, kills silo b
// (which hosts some of the registers) while they run, and checks the
// history. Meanwhile a churn deactivates the registers on the survivors,
// and before the final reads every register is deactivated: the reads
// that follow come from activations that read the store, so a write the
// store acknowledged and lost shows as a stale read. There is no
// explicit "no acknowledged write lost" check: the final reads, from
// the store, are part of the history, and porcupine rejects one that
// misses a write acknowledged before it began.
func runKillAndChurn(t *testing.T, provider storage.Provider) linRun {
	w := newRegisterWorld()
	store := newWriteLog(provider)
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{
		tweak:    func(c *Config) { c.Storage = map[string]storage.Provider{grain.DefaultStorage: store} },
		register: func(s *Silo, name string) { w.register(t, s, name) },
	})
	ctx := testCtx(t)
	h := newLinHistory()
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

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var (
		done      atomic.Int64 // operations completed by the clients
		killed    atomic.Bool  // b is gone: set once kill returned
		killNow   = make(chan struct{})
		signal    sync.Once
		wg        sync.WaitGroup
		killedAt  atomic.Int64 // h.now() when kill returned
		stopChurn = make(chan struct{})
		churned   = make(chan int, 1)
	)
	// The churn works on the survivors only: b's registers are
	// activated afresh on them once b is killed, and a deactivation
	// racing b's Close is not what this checks.
	go func() { churned <- churn(vias, keys, seed, stopChurn) }()
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
	close(stopChurn)
	deactivations := <-churned
	if ctx.Err() != nil {
		t.Fatalf("the clients did not finish in %v", defaultTestTimeout)
	}

	// The final reads, through each survivor, are part of the history.
	// Before each round every register is deactivated, so each read
	// comes from an activation that read the store.
	for _, via := range vias {
		deactivateAll(t, vias, keys)
		for _, key := range keys {
			for {
				_, err := h.get(ctx, setup, via, key)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("final read of %s through %s: %v", key, via.cfg.Name, err)
				}
			}
		}
	}
	run := h.check(t, keys, store)
	t.Logf("b killed at %v; the churn asked for %d deactivations", time.Duration(killedAt.Load()), deactivations)

	// The kill was covered: the registers on b were written and read
	// after it, which took new activations on the survivors.
	for _, key := range keys {
		var wrote, read bool
		for _, op := range opsOf(run.ops, key) {
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
	// So was the churn: each register was activated again and again,
	// each time reading the store.
	for _, key := range keys {
		if n := w.activationsOf(key); n < linMinActivations {
			t.Fatalf("%s had %d activations, want at least %d: the churn did not make the registers read the store", key, n, linMinActivations)
		}
	}
	return run
}

// fencedRegister is the Register probe with fenced reads: Get writes the
// value back under the activation's ETag before it answers. A write
// that fails leaves the value as it was and deactivates the activation,
// as Set does; the caller gets the error.
type fencedRegister struct{ *registerGrain }

func (g fencedRegister) Get(ctx grain.Context, _ *probe.RegisterOp) (*probe.RegisterReply, error) {
	if err := g.st.Write(ctx); err != nil {
		ctx.DeactivateOnIdle()
		return nil, err
	}
	return g.reply(ctx), nil
}

// runDuplicates runs concurrent clients reading and writing a few
// registers registered as a stateless worker of up to linDupWorkers
// activations, on one silo over provider, and checks the history. The
// clients' calls overlap, so a register has several activations at
// once, each with its own copy of the value, all writing one record.
//
// Why a correct system is linearizable by construction: every
// operation that succeeds is a conditional write of the activation's
// value under the ETag the activation last read or wrote (Set writes the
// new value; Get, fenced, writes the same value back). The store takes
// it only if the record is still at that ETag, that is, still holds the
// value the activation has; ETags never repeat. So the store's
// compare-and-set is the operation's linearization point: a Set stores
// its value there, and a Get reads the value the record holds there. A
// write that lost the race (FailedPrecondition) changed nothing; any
// other failure may or may not have landed, which the history allows
// for (see set). An activation that failed a write keeps its ETag, so
// whatever it does next fails too unless that write did not land.
// Without the fenced Get, an activation that another's write made stale
// would keep answering its old value: not linearizable even with a
// correct store.
//
// Why a store that ignores ETags (last writer wins) is caught: its
// writes always succeed, so each activation goes on serving and writing
// back its own copy. Reads through the different activations then
// alternate between the values each last wrote, and a write acknowledged
// through one is overwritten by a stale value written back through
// another: no single register explains that. (Reads from the store
// alone could not tell: blind whole-value writes to a register are
// still linearizable. The stale copies in the activations' memory are
// what the ETag protects.)
func runDuplicates(t *testing.T, provider storage.Provider) linRun {
	w := newRegisterWorld()
	store := newWriteLog(provider)
	cfg := DefaultConfig()
	cfg.Storage = map[string]storage.Provider{grain.DefaultStorage: store}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = probe.RegisterRegisterGrain(s, func(id grain.ID) probe.RegisterGrain {
		return fencedRegister{&registerGrain{w: w, silo: cfg.Name, key: id.Key}}
	}, grain.WithState(registerState), grain.WithStatelessWorker(linDupWorkers))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopSilo(t, s) })

	ctx := testCtx(t)
	h := newLinHistory()
	regs := keys("dup", linDupKeys)
	var values atomic.Int64 // every write writes a value of its own
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	for c := range linClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for n := 0; ctx.Err() == nil && (n < linDupOps || h.now() < int64(linDupFor)); n++ {
				key := regs[rng.IntN(len(regs))]
				if rng.IntN(2) == 0 {
					h.get(ctx, c, s, key)
				} else {
					h.set(ctx, c, s, key, values.Add(1))
				}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the clients did not finish in %v", defaultTestTimeout)
	}
	run := h.check(t, regs, store)

	// Each register was answered by more than one activation. (That
	// some ran at once, the FailedPrecondition failures show:
	// requireFencedLinearizable.)
	for _, key := range regs {
		acts := map[uint64]bool{}
		for _, op := range opsOf(run.ops, key) {
			if out := op.Output.(regOutput); out.ok {
				acts[out.act] = true
			}
		}
		if len(acts) < 2 {
			t.Fatalf("%s: %d activations answered; the run had no duplicates", key, len(acts))
		}
		t.Logf("%s: %d activations made, %d answered", key, w.activationsOf(key), len(acts))
	}
	return run
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
