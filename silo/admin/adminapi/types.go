package adminapi

import "time"

// Paths of the admin HTTP API, relative to a silo's admin address.
const (
	PathHealthz    = "/healthz"            // GET: 200 while the process serves HTTP
	PathReadyz     = "/readyz"             // GET: 200 once the silo serves calls, else 503 and why
	PathMetrics    = "/metrics"            // GET: Prometheus text exposition
	PathSilo       = "/api/v1/silo"        // GET: SiloReport of this silo
	PathCluster    = "/api/v1/cluster"     // GET: ClusterReport, every member asked
	PathLookup     = "/api/v1/lookup"      // GET ?grain=TYPE/KEY: Location
	PathDeactivate = "/api/v1/deactivate"  // POST ?grain=TYPE/KEY: Deactivation
	PathDrain      = "/api/v1/drain"       // POST ?silo=NAME|MEMBER: DrainReply
	PathDashboard  = "/"                   // GET: the dashboard page
	PathEvents     = "/api/v1/cluster/sse" // GET: ClusterReport as server-sent events

	PathStreams     = "/api/v1/streams"        // GET ?limit=N&parked=true&prefix=P: StreamsReport, every member asked
	PathSiloStreams = "/api/v1/silo/streams"   // GET, the same query: StreamsReport of this silo's streams
	PathUnpark      = "/api/v1/streams/unpark" // POST ?stream=P/N/K&subscription=ID: Unparked
)

// SiloReport is what one silo says of itself.
type SiloReport struct {
	Name string `json:"name"`
	// Member is the silo's member ID in its cluster ("" for a silo
	// alone): the name and a generation unique to the process start.
	Member string `json:"member,omitempty"`
	// Status is "joining", "active", "shutting-down" or "stopped".
	Status  string    `json:"status"`
	Started time.Time `json:"started"`
	// UptimeSeconds is the time since Started, as the silo measured it.
	UptimeSeconds float64   `json:"uptime_seconds"`
	Addresses     Addresses `json:"addresses"`
	// Load.
	Activations  int `json:"activations"`
	QueuedTurns  int `json:"queued_turns"`
	BlockedTurns int `json:"blocked_turns"`
	Processors   int `json:"processors"`
	// Overload is what the silo did to protect itself, and whether it
	// sheds load now.
	Overload Overload `json:"overload"`
	// Types has one entry per grain type registered on the silo, sorted
	// by type.
	Types []TypeReport `json:"types"`
	// Hot lists the activations that took the most calls in the last
	// sampling interval, the busiest first.
	Hot []HotGrain `json:"hot"`
	// Errors are the latest failed calls, the newest first.
	Errors []CallError `json:"errors"`
	// Streams sums up the streams active on the silo; nil for a silo that
	// runs no streams, or whose version reports none.
	Streams *StreamsSummary `json:"streams,omitempty"`
}

// Overload counts a silo's self-protection since it started. A silo
// whose version reports none reads as zero and not shedding.
type Overload struct {
	// Shedding is true while the silo refuses new requests because its
	// CPU use or Go heap is over its load-shedding limit.
	Shedding bool `json:"shedding"`
	// ShedRequests counts the requests load shedding refused.
	ShedRequests uint64 `json:"shed_requests"`
	// QueueWarnings counts requests that queued at an activation past its
	// soft queue limit; QueueRefusals those refused at its hard limit.
	QueueWarnings uint64 `json:"queue_warnings"`
	QueueRefusals uint64 `json:"queue_refusals"`
	// WaitRefusals counts requests refused because they waited for their
	// turn past their type's queue wait limit.
	WaitRefusals uint64 `json:"wait_refusals"`
	// LimitRefusals counts new requests refused because the silo ran as
	// many at once as its latency limit allows: ConcurrencyLimit, 0 while
	// nothing is limited. Concurrency is how many run now.
	LimitRefusals    uint64 `json:"limit_refusals"`
	ConcurrencyLimit int64  `json:"concurrency_limit"`
	Concurrency      int64  `json:"concurrency"`
	// MemoryCollections counts idle activations collected because the Go
	// heap was over the memory collection's target.
	MemoryCollections uint64 `json:"memory_collections"`
	// AbandonedTurns counts turns still running when the silo's close
	// stopped waiting for them.
	AbandonedTurns uint64 `json:"abandoned_turns"`
}

// Addresses are where a silo can be reached; empty when it does not serve
// that kind of traffic.
type Addresses struct {
	Gossip  string `json:"gossip,omitempty"`
	GRPC    string `json:"grpc,omitempty"`
	Gateway string `json:"gateway,omitempty"`
	Admin   string `json:"admin,omitempty"`
}

// TypeReport is a grain type's activity on one silo, or summed over a
// cluster.
type TypeReport struct {
	Type        string `json:"type"`
	Activations int    `json:"activations"`
	// Calls and Errors count the requests grains of the type received
	// since the silo started, and those that failed.
	Calls  uint64 `json:"calls"`
	Errors uint64 `json:"errors"`
	// CallRate and ErrorRate are per second, over the last sampling
	// interval.
	CallRate  float64 `json:"call_rate"`
	ErrorRate float64 `json:"error_rate"`
}

// HotGrain is an activation and its calls per second over the last
// sampling interval.
type HotGrain struct {
	Grain    string  `json:"grain"` // TYPE/KEY
	Silo     string  `json:"silo"`  // the member (or name) it is active on
	CallRate float64 `json:"call_rate"`
}

// CallError is a failed call.
type CallError struct {
	Time    time.Time `json:"time"`
	Grain   string    `json:"grain"`  // TYPE/KEY
	Method  string    `json:"method"` // the method's full name
	Code    string    `json:"code"`   // the gRPC code's name, e.g. "Unavailable"
	Message string    `json:"message"`
	Silo    string    `json:"silo,omitempty"`
}

// ClusterReport is what the silo asked says of the whole cluster: each
// member's own report, gathered from their admin servers.
type ClusterReport struct {
	// Asked is the member (or name) of the silo that gathered the report.
	Asked string `json:"asked"`
	// Silos are the reports of the members that answered, sorted by name.
	Silos []SiloReport `json:"silos"`
	// Unreachable lists the members that did not answer, and why.
	Unreachable []Unreachable `json:"unreachable,omitempty"`
	// Types sums the silos' TypeReports per grain type.
	Types []TypeReport `json:"types"`
	// Hot merges the silos' hot grains, the busiest first.
	Hot []HotGrain `json:"hot"`
	// Errors merges the silos' latest errors, the newest first.
	Errors []CallError `json:"errors"`
	// Streams sums the silos' stream summaries; nil when none reported
	// streams.
	Streams *StreamsSummary `json:"streams,omitempty"`
}

// Unreachable is a member whose report could not be had.
type Unreachable struct {
	Member string `json:"member"`
	Admin  string `json:"admin,omitempty"`
	Error  string `json:"error"`
}

// Location says where a grain is active.
type Location struct {
	Grain string `json:"grain"`
	// Active is false when no activation is registered for the grain.
	Active bool `json:"active"`
	// Member is the silo that holds the activation, and Name its name.
	Member string `json:"member,omitempty"`
	Name   string `json:"name,omitempty"`
}

// Deactivation answers a deactivate request.
type Deactivation struct {
	Grain string `json:"grain"`
	// Deactivated is false when the grain had no activation.
	Deactivated bool   `json:"deactivated"`
	Member      string `json:"member,omitempty"`
}

// DrainReply answers a drain request: the silo has begun to hand its
// grains over and leave.
type DrainReply struct {
	Member string `json:"member"`
	Name   string `json:"name"`
}

// Error is the body of every non-2xx answer of the API.
type Error struct {
	// Code is the gRPC code's name that best describes the failure.
	Code    string `json:"code"`
	Message string `json:"message"`
}
