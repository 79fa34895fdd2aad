package grpcapi

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// RegisterDiscovery registers on s the two services through which generic
// clients find their way about a server, and returns the health server:
//
//   - server reflection (grpc.reflection.v1 and v1alpha), from which
//     grpcurl and similar tools learn the services and their message types
//     without the .proto files. It describes the grain services that
//     Register added, since their files are linked into the program;
//   - the standard health service (grpc.health.v1.Health).
//
// The health server reports SERVING for the server as a whole (the service
// name "") and for every service registered on s before this call, so call
// it after Register. The caller owns the health server from then on: it
// sets other services' statuses, and calls Shutdown when the silo begins to
// stop, so that health checks fail while calls drain. Call it before s
// serves. The health server starts no goroutine.
func RegisterDiscovery(s *grpc.Server) *health.Server {
	h := health.NewServer()
	for name := range s.GetServiceInfo() {
		h.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	reflection.Register(s)
	healthpb.RegisterHealthServer(s, h)
	return h
}
