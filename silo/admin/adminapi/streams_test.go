package adminapi

import (
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	parkedAt = time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC)

	streamsReport = StreamsReport{
		Asked: "a-1",
		Total: 2,
		Streams: []StreamReport{{
			Stream: "default/orders/eu", Silo: "b-1", Type: "shop.Order", Last: "1772366400000000000.42", Lag: 3, Parked: 1, SubscriptionCount: 2,
			Subscriptions: []SubscriptionReport{
				{ID: "s1", Grain: "shop.Mailer/eu", Handler: "on-order", Parked: true, ParkedReason: "smtp down", ParkedAt: &parkedAt},
				{ID: "implicit:shop.Stock/eu:on-order", Grain: "shop.Stock/eu", Handler: "on-order", Implicit: true, Lag: 3, Handled: "1772366400000000000.39"},
			},
		}},
		Unreachable: []Unreachable{{Member: "c-1", Admin: "10.0.0.3:8080", Error: "connection refused"}},
	}
)

// TestClientStreams: the stream methods send their method, path and
// query, the query leaving out what is zero, and decode the answers.
func TestClientStreams(t *testing.T) {
	var mu sync.Mutex
	var got []string
	_, c := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		if r.URL.Path == PathUnpark {
			writeJSON(w, http.StatusOK, Unparked{Stream: "default/orders/eu", Subscription: "s1", Grain: "shop.Mailer/eu", Handler: "on-order"})
			return
		}
		writeJSON(w, http.StatusOK, streamsReport)
	}))
	ctx := testContext(t)
	r, err := c.Streams(ctx, StreamsQuery{Prefix: "default/orders/", Parked: true, Limit: 5})
	if err != nil || !reflect.DeepEqual(r, streamsReport) {
		t.Errorf("Streams = %+v, %v\nwant %+v", r, err, streamsReport)
	}
	if _, err := c.Streams(ctx, StreamsQuery{}); err != nil {
		t.Error(err)
	}
	if r, err = c.SiloStreams(ctx, StreamsQuery{Limit: 1}); err != nil || !reflect.DeepEqual(r, streamsReport) {
		t.Errorf("SiloStreams = %+v, %v", r, err)
	}
	u, err := c.Unpark(ctx, "default/orders/eu", "implicit:shop.Stock/eu:on-order")
	if want := (Unparked{Stream: "default/orders/eu", Subscription: "s1", Grain: "shop.Mailer/eu", Handler: "on-order"}); err != nil || u != want {
		t.Errorf("Unpark = %+v, %v; want %+v", u, err, want)
	}
	want := []string{
		"GET /api/v1/streams?limit=5&parked=true&prefix=default%2Forders%2F",
		"GET /api/v1/streams",
		"GET /api/v1/silo/streams?limit=1",
		"POST /api/v1/streams/unpark?stream=default%2Forders%2Feu&subscription=implicit%3Ashop.Stock%2Feu%3Aon-order",
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests %q\nwant %q", got, want)
	}
}

// TestClientUnparkEmptyArguments: Unpark without a stream or a
// subscription fails at once, sending nothing.
func TestClientUnparkEmptyArguments(t *testing.T) {
	var sent atomic.Bool
	_, c := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent.Store(true) }))
	ctx := testContext(t)
	if _, err := c.Unpark(ctx, "", "s1"); err == nil || !strings.Contains(err.Error(), "PROVIDER/NAMESPACE/KEY") {
		t.Errorf("Unpark without a stream: %v", err)
	}
	if _, err := c.Unpark(ctx, "default/orders/eu", ""); err == nil || !strings.Contains(err.Error(), "empty subscription") {
		t.Errorf("Unpark without a subscription: %v", err)
	}
	if sent.Load() {
		t.Error("a request was sent for empty arguments")
	}
}
