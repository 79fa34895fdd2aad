package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/granaryio/granary/internal/chromium"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin/adminapi"
)

// browserTimeout bounds the browser test as a whole: starting Chromium
// under the race detector on a small machine takes seconds.
const browserTimeout = 90 * time.Second

// chromiumPath returns the Chromium to drive: GRANARY_CHROMIUM, as
// scripts/chromium.sh prints it, or one on PATH. Without one the test is
// skipped, or fails when GRANARY_TEST_CHROMIUM_REQUIRED=1.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p, err := chromium.Find(os.Getenv(chromium.Env))
	if err == nil {
		return p
	}
	if os.Getenv("GRANARY_TEST_CHROMIUM_REQUIRED") == "1" {
		t.Fatalf("%v (GRANARY_TEST_CHROMIUM_REQUIRED=1)", err)
	}
	t.Skip(err)
	return ""
}

// startLoad calls probe grains through the silos until the returned func
// is called, which waits for it: a few hot keys often, more keys now and
// then, and a call that fails every so often.
func startLoad(c *testCluster) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	names := c.names()
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
		defer cancel()
		tk := time.NewTicker(2 * time.Millisecond) // paces the load; nothing waits on it
		defer tk.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			sl := c.node(names[i%len(names)]).sl
			key := []string{"cart", "cart", "cart", "inventory", "inventory", "session"}[i%6]
			if i%10 == 9 {
				key = fmt.Sprintf("user-%d", i%40)
			}
			req := &probe.Request{}
			if i%25 == 24 {
				req = &probe.Request{Tag: "fail", Text: "out of stock"}
			}
			// Failures are part of the load; the test looks at the page.
			probe.NewProbeRef(sl, key).Call(ctx, req)
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// signIn waits for the dashboard's token form, which the page shows when
// the admin server answers 401, and submits token through it.
func signIn(t *testing.T, tab context.Context, token string) {
	t.Helper()
	const formShown = `(() => !document.getElementById('login').hidden &&
		document.getElementById('feed').textContent === 'locked')()`
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](formShown, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for the page to ask for a token: %v", err)
	}
	// As a user would: type into the field and submit the form, which
	// runs the page's own submit handler.
	submit := fmt.Sprintf(`(() => {
		document.getElementById('token').value = %q;
		document.getElementById('login').requestSubmit();
		return true;
	})()`, token)
	if _, err := chromedp.Run(tab, chromedp.Evaluate[bool](submit)); err != nil {
		t.Fatalf("submitting the token: %v", err)
	}
}

// TestDashboardInBrowser loads the dashboard of a three-silo cluster in
// headless Chromium, signs in with the admin token when the page asks for
// it, and waits until its silos table lists all three, and its streams
// panel a stream with a parked subscription, marked, above the others;
// then saves a screenshot (to GRANARY_DASHBOARD_SCREENSHOT when set). The
// page must write no error to its console but the refusals expected.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	execPath := chromiumPath(t)
	log := newStreamLog()
	c := newTestClusterWith(t, nodeOptions{sampleInterval: 250 * time.Millisecond, streams: log}, "a", "b", "c")
	parked := parkOnB(t, c, log)
	stopLoad := startLoad(c)
	defer stopLoad()

	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	tab, closeBrowser := chromium.Start(ctx, execPath, t.TempDir())
	defer func() {
		// The browser's process ends before the cluster stops and goleak
		// looks.
		if err := closeBrowser(); err != nil {
			t.Error(err)
		}
	}()

	// Collect what the page writes to its console: a script error, a
	// refused resource or a policy violation shows there.
	consoleCtx, stopConsole := context.WithCancel(tab)
	var (
		mu       sync.Mutex
		problems []string
		readers  sync.WaitGroup
	)
	messages := chromedp.Console(consoleCtx)
	readers.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleWarning {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line))
				mu.Unlock()
			}
		}
	})
	defer func() {
		stopConsole()
		readers.Wait()
	}()

	url := "http://" + c.node("a").srv.Addr() + "/"
	if err := chromedp.Do(tab, chromedp.Navigate(url)); err != nil {
		t.Fatalf("loading %s: %v", url, err)
	}
	// The cluster has an admin token file: the page shows nothing before
	// it has the token.
	signIn(t, tab, adminToken)
	// Three rows, one per silo, each naming its silo.
	const silosShown = `(() => {
		const rows = document.querySelectorAll('#silos tbody tr[data-silo]');
		const names = Array.from(rows, r => r.dataset.silo).sort().join(',');
		return names === 'a,b,c' ? names : '';
	})()`
	if _, err := chromedp.Run(tab, chromedp.Poll[string](silosShown, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for the silos table to list a, b and c: %v", err)
	}
	// The load shows, live over the stream: hot grains, a call rate, and
	// the failed calls.
	const loadShown = `(() => {
		const hot = document.querySelectorAll('#hot tbody tr td.num').length;
		const errors = document.querySelectorAll('#errors tbody tr td.code').length;
		const calls = parseFloat(document.getElementById('total-calls').textContent);
		const feed = document.getElementById('feed').textContent;
		return hot > 0 && errors > 0 && calls > 0 && feed === 'live';
	})()`
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](loadShown, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for hot grains, call rates and errors over the live feed: %v", err)
	}
	statuses, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#silos tbody tr .badge'), b => b.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(statuses, []string{"active", "active", "active"}) {
		t.Errorf("status badges %v, want three active", statuses)
	}

	// b starts shedding load and limiting its new requests: its row gains
	// a badge for each beside its status, and the others' rows have none.
	c.node("b").sl.TestHooks().SetOverload(silo.OverloadStats{Shedding: true, Shed: 7, QueueRefusals: 3, ConcurrencyLimit: 40, LimitRefusals: 5})
	const sheddingShown = `(() => {
		const shown = Array.from(document.querySelectorAll('#silos tbody tr[data-silo]'),
			r => r.dataset.silo + ':' + Array.from(r.querySelectorAll('.badge-shedding'), b => b.textContent).join('+'));
		return shown.join(',');
	})()`
	if _, err := chromedp.Run(tab, chromedp.Poll[string](`(() => { const s = `+sheddingShown+`; return s === 'a:,b:shedding load+limited to 40,c:' ? s : ''; })()`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		shown, _ := chromedp.Run(tab, chromedp.Evaluate[string](sheddingShown))
		t.Fatalf("waiting for a shedding-load badge on b alone (shown: %q): %v", shown, err)
	}
	const bStatusCell = `(() => {
		const cell = document.querySelector('#silos tbody tr[data-silo="b"] td:nth-child(3)');
		const [shed, limited] = cell.querySelectorAll('.badge-shedding');
		return [Array.from(cell.querySelectorAll('.badge'), b => b.textContent).join('|'), shed.title, limited.title];
	})()`
	cell, err := chromedp.Run(tab, chromedp.Evaluate[[]string](bStatusCell))
	if err != nil {
		t.Fatal(err)
	}
	if len(cell) != 3 || cell[0] != "active|shedding load|limited to 40" || !strings.Contains(cell[1], "shed requests: 7") || !strings.Contains(cell[1], "refusals: 3") ||
		!strings.Contains(cell[2], "at most 40 new requests at once") || !strings.Contains(cell[2], "refused at the limit: 5") {
		t.Errorf("b's status cell holds badges and tooltips %q, want active, shedding load and limited to 40, the tooltips counting 7 shed and 3 refused, and 5 refused at the limit", cell)
	}

	// The streams panel: on-b first, its parked subscription marked with
	// a badge and the reason, its other one delivering; then on-a; and the
	// panel's facts count one parked subscription of two streams.
	const streamsShown = `(() => {
		const rows = Array.from(document.querySelectorAll('#streams tbody tr[data-subscription]'));
		const parked = rows.filter(r => r.classList.contains('parked'));
		if (document.getElementById('streams-panel').hidden || rows.length !== 3 || parked.length !== 1) return [];
		const p = parked[0];
		return [
			rows.map(r => r.dataset.stream + ':' + r.querySelector('.badge').textContent).join(','),
			p.dataset.subscription,
			p.querySelector('.stream-status .message').textContent,
			document.getElementById('streams-parked').textContent + '/' + document.getElementById('streams-active').textContent,
		];
	})()`
	var shown []string
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](`(() => { const s = `+streamsShown+`; return s.length === 4; })()`,
		chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		shown, _ = chromedp.Run(tab, chromedp.Evaluate[[]string](streamsShown))
		t.Fatalf("waiting for the streams panel to list three subscriptions, one parked (shown: %q): %v", shown, err)
	}
	if shown, err = chromedp.Run(tab, chromedp.Evaluate[[]string](streamsShown)); err != nil {
		t.Fatal(err)
	}
	if len(shown) != 4 || shown[0] != "default/jobs/on-b:parked,default/jobs/on-b:caught up,default/jobs/on-a:caught up" || shown[1] != parked ||
		!strings.Contains(shown[2], "bad-b refuses tick 0") || shown[3] != "1/2" {
		t.Errorf("the streams panel shows %q; want on-b's parked subscription %s first, with its reason, then on-b's and on-a's caught up, and 1 parked of 2 streams", shown, parked)
	}

	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := os.Getenv("GRANARY_DASHBOARD_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "dashboard.png")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the dashboard: %s", path)

	// A silo whose admin server stops moves to the unreachable list.
	if err := c.node("c").srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	const cUnreachable = `(() => {
		const silos = Array.from(document.querySelectorAll('#silos tbody tr[data-silo]'), r => r.dataset.silo).join(',');
		const down = document.querySelectorAll('#unreachable tbody tr[data-member]').length;
		return silos === 'a,b' && down === 1 && !document.getElementById('unreachable').hidden;
	})()`
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](cUnreachable, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for c to show as unreachable: %v", err)
	}

	// Behind a proxy that serves the dashboard under a path prefix and
	// refuses the event stream, the page polls the report instead.
	proxy := pollingProxy(t, c.node("a").srv.Addr())
	if err := chromedp.Do(tab, chromedp.Navigate(proxy+"/granary/")); err != nil {
		t.Fatalf("loading the dashboard through the proxy: %v", err)
	}
	// Another origin, so another session storage: the page asks again.
	signIn(t, tab, adminToken)
	const polled = `(() => {
		const silos = Array.from(document.querySelectorAll('#silos tbody tr[data-silo]'), r => r.dataset.silo).join(',');
		return silos === 'a,b' && document.getElementById('feed').textContent === 'polling';
	})()`
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](polled, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for the page to poll through the proxy: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		// The proxy's refusal of the stream, and the 401 that asked for
		// the token, are the errors expected.
		t.Logf("the page's console: %s", p)
		if !strings.Contains(p, "sse") && !strings.Contains(p, "401") {
			t.Errorf("the page's console: %s", p)
		}
	}
}

// pollingProxy serves the admin server at addr under the path /granary/,
// except its event stream, which it refuses. It returns the proxy's URL.
func pollingProxy(t *testing.T, addr string) string {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: addr}
	transport := &http.Transport{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.URL.Path = strings.TrimPrefix(r.In.URL.Path, "/granary")
		},
		Transport: transport,
	}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/granary/"+strings.TrimPrefix(adminapi.PathEvents, "/"):
			http.Error(w, "no event streams through this proxy", http.StatusNotFound)
		case strings.HasPrefix(r.URL.Path, "/granary/"):
			rp.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() {
		proxy.Close()
		transport.CloseIdleConnections()
	})
	return proxy.URL
}
