package gateway

import (
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/internal/streaming"
)

// streamService is granary.v1.StreamGateway, served by hand as the
// transport's services are: Subscribe tails a durable stream's log for a
// client, through Config.StreamTail. The gateway's stream interceptor
// authenticates it like any stream.
func (g *Gateway) streamService() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "granary.v1.StreamGateway",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Subscribe",
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				req := new(granaryv1.StreamTailRequest)
				if err := ss.RecvMsg(req); err != nil {
					return err
				}
				start := func(pos uint64) error {
					return ss.SendHeader(metadata.Pairs(streaming.PositionHeader, strconv.FormatUint(pos, 10)))
				}
				return g.cfg.StreamTail(ss.Context(), req, start, func(it *granaryv1.StreamItem) error { return ss.SendMsg(it) })
			},
		}},
		Metadata: "granary/v1/streams.proto",
	}
}
