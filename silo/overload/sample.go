package overload

import "runtime/metrics"

// heapMetric is the heap LiveHeap reads: the bytes of the objects the
// latest garbage collection found reachable. The heap's total size
// (/memory/classes/heap/objects:bytes) counts the garbage not yet
// collected as well, so it climbs to about twice the live heap between
// collections (GOGC=100) and drops at each: averaged against a limit it
// would flap with the allocation rate, not with what the silo holds.
// The live heap moves only with what is retained, which is what a limit
// on memory is about; it lags by at most one collection, which a window
// of seconds covers.
const heapMetric = "/gc/heap/live:bytes"

// LiveHeap returns the bytes of Go heap that the latest garbage
// collection found live.
func LiveHeap() uint64 {
	s := [1]metrics.Sample{{Name: heapMetric}}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// GCCount returns how many garbage collections have completed.
func GCCount() uint64 {
	s := [1]metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
