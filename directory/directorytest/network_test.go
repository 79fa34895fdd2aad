package directorytest_test

import (
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/directory/directorytest"
	"github.com/granaryio/granary/grain"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// handler answers what its function says, or holds the reply for later.
type handler struct {
	answer func(*directory.Request) (*directory.Response, error)
	held   []func(*directory.Response, error)
	got    []*directory.Request
}

func (h *handler) Handle(_ string, req *directory.Request, reply func(*directory.Response, error)) {
	h.got = append(h.got, req)
	if h.answer == nil {
		h.held = append(h.held, reply)
		return
	}
	reply(h.answer(req))
}

var id = grain.NewID("t", "k")

func lookup() *directory.Request {
	return &directory.Request{Op: directory.OpLookup, Items: []directory.Item{{ID: id}}}
}

type outcome struct {
	calls int
	resp  *directory.Response
	err   error
}

func (o *outcome) done(resp *directory.Response, err error) { o.calls++; o.resp, o.err = resp, err }

func TestRequestAndReply(t *testing.T) {
	n := directorytest.NewNetwork()
	b := &handler{answer: func(*directory.Request) (*directory.Response, error) {
		return &directory.Response{Found: true, Entry: directory.Entry{Silo: "b", Activation: 1}}, nil
	}}
	n.Attach("b", b)
	var o outcome
	req := lookup()
	n.Sender("a").Send("b", req, o.done)
	req.Items[0].ID = grain.NewID("t", "changed") // the network holds a copy
	if o.calls != 0 || n.Len() != 1 {
		t.Fatalf("Send answered at once (%d) or queued %d", o.calls, n.Len())
	}
	if got := n.Messages()[0].String(); got != "a->b Lookup t/k" {
		t.Errorf("message = %q", got)
	}
	n.Deliver(0)
	if len(b.got) != 1 || b.got[0].Items[0].ID != id {
		t.Fatalf("b got %v", b.got)
	}
	if got := n.Messages()[0].String(); got != "b->a reply Lookup: b:1" {
		t.Errorf("reply = %q", got)
	}
	if n.Open() != 1 {
		t.Errorf("Open() = %d before the reply is delivered", n.Open())
	}
	n.DeliverAll(10)
	if o.calls != 1 || !o.resp.Found || n.Open() != 0 {
		t.Errorf("done called %d times with %v; Open() = %d", o.calls, o.resp, n.Open())
	}
}

func TestUnreachableAndFail(t *testing.T) {
	n := directorytest.NewNetwork()
	var toNobody, lostReq, lostReply outcome
	n.Sender("a").Send("nobody", lookup(), toNobody.done)
	n.DeliverAll(10)
	if toNobody.calls != 1 || status.Code(toNobody.err) != codes.Unavailable {
		t.Errorf("request to an unknown silo: %+v", toNobody)
	}

	b := &handler{answer: func(*directory.Request) (*directory.Response, error) { return &directory.Response{}, nil }}
	n.Attach("b", b)
	n.Sender("a").Send("b", lookup(), lostReq.done)
	n.Fail(0)
	n.DeliverAll(10)
	if len(b.got) != 0 || lostReq.calls != 1 || status.Code(lostReq.err) != codes.Unavailable {
		t.Errorf("failed request: b got %d, outcome %+v", len(b.got), lostReq)
	}
	n.Sender("a").Send("b", lookup(), lostReply.done)
	n.Deliver(0)
	n.Fail(0)
	n.DeliverAll(10)
	if len(b.got) != 1 || lostReply.calls != 1 || status.Code(lostReply.err) != codes.Unavailable {
		t.Errorf("failed reply: b got %d, outcome %+v", len(b.got), lostReply)
	}
}

func TestCrash(t *testing.T) {
	n := directorytest.NewNetwork()
	b := &handler{} // holds its replies
	n.Attach("b", b)
	n.Attach("c", &handler{answer: func(*directory.Request) (*directory.Response, error) { return &directory.Response{}, nil }})
	var serving, queued, fromB outcome
	n.Sender("a").Send("b", lookup(), serving.done)
	n.Deliver(0)
	n.Sender("a").Send("b", lookup(), queued.done)
	n.Sender("b").Send("c", lookup(), fromB.done)
	n.Crash("b")
	if !n.Down("b") {
		t.Error("b is not down")
	}
	b.held[0](&directory.Response{}, nil) // too late: ignored
	n.DeliverAll(10)
	for name, o := range map[string]outcome{"serving": serving, "queued": queued} {
		if o.calls != 1 || status.Code(o.err) != codes.Unavailable {
			t.Errorf("%s request: %+v, want one Unavailable", name, o)
		}
	}
	if fromB.calls != 0 {
		t.Error("a reply reached crashed b")
	}
	if n.Open() != 0 {
		t.Errorf("Open() = %d", n.Open())
	}
}

func TestDoubleReplyPanics(t *testing.T) {
	n := directorytest.NewNetwork()
	h := &handler{} // holds its replies
	n.Attach("b", h)
	var o outcome
	n.Sender("a").Send("b", lookup(), o.done)
	n.Deliver(0)
	h.held[0](&directory.Response{}, nil)
	defer func() {
		if recover() == nil {
			t.Error("a second reply did not panic")
		}
	}()
	h.held[0](&directory.Response{}, nil)
}
