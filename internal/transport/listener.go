package transport

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/granaryio/granary/security"
	"google.golang.org/grpc"
)

// A Listener is where a silo accepts the streams of other silos.
type Listener interface {
	// Addr is the address other silos dial.
	Addr() string
	// Serve starts handing accepted streams to t. Once only.
	Serve(t *Transport) error
	// Stop stops accepting, ends the accepted streams and waits for their
	// Serve calls. Idempotent.
	Stop()
	// GracefulStop stops accepting and waits for the accepted streams to
	// end and their last bytes to be written, until ctx ends; then it
	// stops as Stop does.
	GracefulStop(ctx context.Context)
}

// GRPCListener serves streams on a gRPC server of its own.
type GRPCListener struct {
	lis     net.Listener
	srv     *grpc.Server
	service string            // whose Connect streams it serves
	extra   []grpc.MethodDesc // unary methods of the same service
	done    chan struct{}     // closed when the server's Serve returns

	mu              sync.Mutex
	served, stopped bool
}

// ListenGRPC listens on addr ("host:port"; port 0 picks a free one) with a
// gRPC server whose options fit cfg, plus opts (credentials, say), and at
// most cfg.MaxConnections connections at once; a connection whose first
// bytes are neither TLS nor HTTP/2 is counted as a malformed frame.
// Register other services on Server before Serve.
func ListenGRPC(addr string, cfg Config, opts ...grpc.ServerOption) (*GRPCListener, error) {
	return ListenGRPCService(addr, SiloService, nil, cfg, opts...)
}

// ListenGRPCService is ListenGRPC for the streams of service's Connect
// method, with the unary methods extra beside it.
func ListenGRPCService(addr, service string, extra []grpc.MethodDesc, cfg Config, opts ...grpc.ServerOption) (*GRPCListener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	lis = security.Listen(lis, security.ListenerOptions{
		Name: cfg.listener(), Rejections: cfg.Rejections,
		MaxConnections: cfg.MaxConnections, Expect: security.LooksLikeGRPC,
	})
	srv := grpc.NewServer(append(ServerOptions(cfg), opts...)...)
	return &GRPCListener{lis: lis, srv: srv, service: service, extra: extra, done: make(chan struct{})}, nil
}

// Addr returns the address the listener is bound to.
func (l *GRPCListener) Addr() string { return l.lis.Addr().String() }

// Server returns the gRPC server, for registering other services.
func (l *GRPCListener) Server() *grpc.Server { return l.srv }

// Serve registers the stream service for t and starts serving.
func (l *GRPCListener) Serve(t *Transport) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.served {
		return errors.New("transport: Serve after Stop, or twice")
	}
	l.served = true
	RegisterGRPCService(l.srv, l.service, t, l.extra)
	go func() {
		defer close(l.done)
		l.srv.Serve(l.lis)
	}()
	return nil
}

// Stop stops the server, which ends every stream, and waits for it and
// for the Serve calls of the streams (the server has WaitForHandlers from
// ServerOptions).
func (l *GRPCListener) Stop() {
	l.mu.Lock()
	first, served := !l.stopped, l.served
	l.stopped = true
	l.mu.Unlock()
	if first {
		l.srv.Stop()
		if !served {
			l.lis.Close()
		}
	}
	if served {
		<-l.done
	}
}

// GracefulStop stops the server once its streams have ended, or at once
// when ctx ends first.
func (l *GRPCListener) GracefulStop(ctx context.Context) {
	l.mu.Lock()
	served := l.served && !l.stopped
	l.mu.Unlock()
	if served {
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.srv.GracefulStop()
		}()
		select {
		case <-done:
		case <-ctx.Done():
			l.srv.Stop()
			<-done
		}
	}
	l.Stop()
}

// Listener returns a Listener at addr on the in-memory network.
func (n *MemNetwork) Listener(addr string) Listener { return &memListener{n: n, addr: addr} }

type memListener struct {
	n    *MemNetwork
	addr string
}

func (l *memListener) Addr() string { return l.addr }

func (l *memListener) Serve(t *Transport) error {
	l.n.Listen(l.addr, t)
	return nil
}

func (l *memListener) Stop() {
	l.n.Unlisten(l.addr)
	l.n.waitFor(l.addr)
}

func (l *memListener) GracefulStop(ctx context.Context) {
	l.n.mu.Lock()
	delete(l.n.listeners, l.addr) // no new streams; the open ones end by themselves
	l.n.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.n.waitFor(l.addr)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		l.Stop()
		<-done
	}
}
