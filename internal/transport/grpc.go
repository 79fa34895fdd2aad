package transport

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	grpcpeer "google.golang.org/grpc/peer"
)

// The gRPC services whose Connect method carries streams of frames:
// between silos, and from external clients to a silo's gateway.
const (
	SiloService    = "granary.v1.SiloTransport"
	GatewayService = "granary.v1.Gateway"
)

// frameCodecName is the content-subtype of silo streams. The codec is
// registered with gRPC, so a server picks it for these streams by their
// content type while its other services keep the proto codec.
const frameCodecName = "granary-frame"

func init() { encoding.RegisterCodecV2(frameCodec{}) }

// frameMsg is the message type of silo streams: one frame, already
// encoded.
type frameMsg struct{ b []byte }

// frameCodec passes frames through: the transport encodes envelopes
// itself.
type frameCodec struct{}

func (frameCodec) Name() string { return frameCodecName }

func (frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frameMsg)
	if !ok {
		return nil, fmt.Errorf("transport: frame codec cannot marshal %T", v)
	}
	// A copy into a pooled buffer that gRPC frees once written, so the
	// writer may reuse its frame as soon as Send returns.
	return mem.BufferSlice{mem.Copy(f.b, mem.DefaultBufferPool())}, nil
}

func (frameCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frameMsg)
	if !ok {
		return fmt.Errorf("transport: frame codec cannot unmarshal into %T", v)
	}
	f.b = data.Materialize()
	return nil
}

var connectStream = grpc.StreamDesc{StreamName: "Connect", ServerStreams: true, ClientStreams: true}

// RegisterGRPC serves silo streams on s, handing each to t.Serve. Give
// the server ServerOptions(cfg) so it accepts frames as large as the
// transport sends.
func RegisterGRPC(s grpc.ServiceRegistrar, t *Transport) { RegisterGRPCService(s, SiloService, t, nil) }

// RegisterGRPCService serves the streams of service's Connect method on
// s, handing each to t.Serve, and registers the unary methods extra
// beside it (the gateway's list of gateways, say).
func RegisterGRPCService(s grpc.ServiceRegistrar, service string, t *Transport, extra []grpc.MethodDesc) {
	sd := connectStream
	sd.Handler = func(_ any, ss grpc.ServerStream) error {
		// Returning ends the stream, and with it a Recv or Send
		// of the endpoint's goroutines blocked on it.
		return t.serve(serverConn{ss}, ss.Context().Done())
	}
	desc := grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods:     extra,
		Streams:     []grpc.StreamDesc{sd},
		Metadata:    "granary/v1/wire.proto",
	}
	s.RegisterService(&desc, t)
}

// Window sizes of silo streams: larger than gRPC's 64 KiB defaults, so a
// stream of batches is not held back by flow control on a fast network.
const (
	streamWindow = 4 << 20
	connWindow   = 16 << 20
)

// ServerOptions returns the gRPC server options that silo streams need
// under cfg: message size limits that fit the largest frame, windows for
// throughput, the connection hygiene of cfg (handshake deadline, idle
// connections closed, a cap on streams, keepalive enforcement), and
// WaitForHandlers, so that the server's Stop waits for the Serve calls of
// the streams it ends (as Listener.Stop promises) instead of leaving them
// delivering into a silo that has stopped. The last applies to every
// service on the server. Options given after these override them.
func ServerOptions(cfg Config) []grpc.ServerOption {
	limit := cfg.maxFrame() + 1024
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(limit),
		grpc.MaxSendMsgSize(limit),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.WaitForHandlers(true),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.MaxConnectionIdle}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true}),
	}
	if cfg.HandshakeTimeout > 0 {
		opts = append(opts, grpc.ConnectionTimeout(cfg.HandshakeTimeout))
	}
	if cfg.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams))
	}
	return opts
}

// serverConn is the accepting end of a silo stream. Its Close does
// nothing, as a gRPC server stream cannot be ended from outside its
// handler: the stream ends when the handler (Serve) returns, which it
// does once the endpoint fails, when the dialling silo closes it, or when
// the server stops.
type serverConn struct{ ss grpc.ServerStream }

func (c serverConn) Send(frame []byte) error { return c.ss.SendMsg(&frameMsg{b: frame}) }

func (c serverConn) Recv() ([]byte, error) {
	var f frameMsg
	if err := c.ss.RecvMsg(&f); err != nil {
		return nil, err
	}
	return f.b, nil
}

func (serverConn) Close() error { return nil } // Serve's return ends the stream

// RemoteAddr is the address of the connection the stream came on.
func (c serverConn) RemoteAddr() string {
	if p, ok := grpcpeer.FromContext(c.ss.Context()); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func (serverConn) CloseSend() error { return nil } // the stream ends when Serve returns

// GRPCNetwork dials streams over gRPC, one channel per address.
type GRPCNetwork struct {
	opts   []grpc.DialOption
	method string // the Connect method dialled

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewGRPCNetwork returns a network whose channels use cfg's size limits
// and the given dial options (credentials among them; without any, the
// channels are insecure).
func NewGRPCNetwork(cfg Config, opts ...grpc.DialOption) *GRPCNetwork {
	return NewGRPCServiceNetwork(SiloService, cfg, opts...)
}

// NewGRPCServiceNetwork is NewGRPCNetwork for the streams of service's
// Connect method.
func NewGRPCServiceNetwork(service string, cfg Config, opts ...grpc.DialOption) *GRPCNetwork {
	limit := cfg.maxFrame() + 1024
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit)),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
	}
	return &GRPCNetwork{opts: append(base, opts...), method: "/" + service + "/Connect", conns: map[string]*grpc.ClientConn{}}
}

// Dial opens a silo stream to addr.
func (g *GRPCNetwork) Dial(ctx context.Context, addr string) (Conn, error) {
	cc, err := g.ClientConn(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel) // the dial's deadline ends a stream not yet open
	// Not WaitForReady: a peer that refuses connections (killed, say) fails
	// the dial at once instead of holding it for the whole DialTimeout,
	// so calls to it fail fast until membership declares it dead.
	st, err := cc.NewStream(sctx, &connectStream, g.method, grpc.ForceCodecV2(frameCodec{}))
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &clientConn{st: st, cancel: cancel}, nil
}

// ClientConn returns the channel to addr, made on first use, for unary
// calls beside the streams. Forget and Close close it.
func (g *GRPCNetwork) ClientConn(addr string) (*grpc.ClientConn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cc := g.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, g.opts...)
	if err != nil {
		return nil, err
	}
	g.conns[addr] = cc
	return cc, nil
}

// Forget closes the channel to addr.
func (g *GRPCNetwork) Forget(addr string) {
	g.mu.Lock()
	cc := g.conns[addr]
	delete(g.conns, addr)
	g.mu.Unlock()
	if cc != nil {
		cc.Close()
	}
}

// Close closes every channel.
func (g *GRPCNetwork) Close() error {
	g.mu.Lock()
	conns := g.conns
	g.conns = map[string]*grpc.ClientConn{}
	g.mu.Unlock()
	for _, cc := range conns {
		cc.Close()
	}
	return nil
}

// clientConn is the dialling end of a silo stream.
type clientConn struct {
	st     grpc.ClientStream
	cancel context.CancelFunc
}

func (c *clientConn) Send(frame []byte) error { return c.st.SendMsg(&frameMsg{b: frame}) }

func (c *clientConn) Recv() ([]byte, error) {
	var f frameMsg
	if err := c.st.RecvMsg(&f); err != nil {
		return nil, err
	}
	return f.b, nil
}

func (c *clientConn) CloseSend() error { return c.st.CloseSend() }

func (c *clientConn) Close() error {
	c.cancel()
	return nil
}

// StreamHello returns the sender that the hello opening a stream names,
// read as the accepting side reads it: m is the first message a server
// stream's RecvMsg filled, which interceptors see. ok is false when m is
// not a frame that opens with a hello.
func StreamHello(m any) (sender string, ok bool) {
	f, isFrame := m.(*frameMsg)
	if !isFrame {
		return "", false
	}
	hello, _, ok := openingHello(f.b)
	if !ok {
		return "", false
	}
	return hello.Hello.GetSilo(), true
}
