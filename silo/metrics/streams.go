package metrics

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/granaryio/granary/silo"
	"github.com/prometheus/client_golang/prometheus"
)

// The streams' families, of a silo whose Config.Streams is set. The
// counters count since the silo started; the gauges describe the streams
// active on the silo at the scrape.
var (
	streamsActive       = desc("streams_active", "Streams active on this silo: activations of their stream grains.")
	streamSubscriptions = desc("stream_subscriptions", "Subscriptions of the streams active on this silo, explicit and implicit.")
	streamParkedNow     = desc("stream_subscriptions_parked", "Subscriptions of the streams active on this silo that are parked: delivery to them failed past the provider's retries and stopped until they are unparked.")
	streamPending       = desc("stream_pending_events", "Events waiting for the subscribers of the streams active on this silo, summed over the subscriptions.")
	streamLag           = desc("stream_subscription_lag", "Events waiting for one subscription, BOUNDED: only the subscriptions with the most events waiting on this silo "+
		"(Config.StreamLagSeries of them, default "+strconv.Itoa(DefaultStreamLagSeries)+"), and none with nothing waiting; granary_stream_pending_events is the total.",
		"stream", "subscription", "grain")
	streamPublished = desc("stream_events_published_total", "Events published to the streams active on this silo.")
	streamDelivered = desc("stream_events_delivered_total", "Events subscribers handled, counted once per subscriber.")
	streamDropped   = desc("stream_events_dropped_total", "Events not delivered to a subscriber, counted once per subscriber: its buffer was full, it was parked, or its stream deactivated first.")
	streamRetried   = desc("stream_deliveries_retried_total", "Deliveries to subscribers tried again after a failure.")
	streamParked    = desc("stream_subscriptions_parked_total", "Subscriptions parked because delivery to them failed past the provider's retries.")
	streamUnparked  = desc("stream_subscriptions_unparked_total", "Parked subscriptions unparked.")
)

var streamDescs = []*prometheus.Desc{
	streamsActive, streamSubscriptions, streamParkedNow, streamPending, streamLag,
	streamPublished, streamDelivered, streamDropped, streamRetried, streamParked, streamUnparked,
}

// subscriptionLag is one subscription's lag, a candidate for
// granary_stream_subscription_lag.
type subscriptionLag struct {
	stream, subscription, grain string
	lag                         int
}

// collectStreams sends the streams' families: the counters st, the gauges
// summed over active, and the lag of the n subscriptions of active with the
// most events waiting.
func collectStreams(e emit, st silo.StreamStats, active []silo.StreamStatus, n int) {
	e.counter(streamPublished, st.Published)
	e.counter(streamDelivered, st.Delivered)
	e.counter(streamDropped, st.Dropped)
	e.counter(streamRetried, st.Retried)
	e.counter(streamParked, st.Parked)
	e.counter(streamUnparked, st.Unparked)

	subs, parked, pending := 0, 0, 0
	top := make([]subscriptionLag, 0, n+1) // the most behind first
	for _, s := range active {
		name := ""
		for _, sub := range s.Subscriptions {
			subs++
			pending += sub.Lag
			if sub.Parked {
				parked++
			}
			if sub.Lag == 0 || len(top) == n && sub.Lag <= top[n-1].lag {
				continue
			}
			if name == "" {
				name = s.ID.String()
			}
			l := subscriptionLag{stream: name, subscription: sub.ID, grain: sub.Grain, lag: sub.Lag}
			i, _ := slices.BinarySearchFunc(top, l, byLag)
			top = slices.Insert(top, i, l)
			if len(top) > n {
				top = top[:n]
			}
		}
	}
	e.gauge(streamsActive, float64(len(active)))
	e.gauge(streamSubscriptions, float64(subs))
	e.gauge(streamParkedNow, float64(parked))
	e.gauge(streamPending, float64(pending))
	for _, l := range top {
		e.gauge(streamLag, float64(l.lag), l.stream, l.subscription, l.grain)
	}
}

// byLag orders subscriptions the most behind first, then by name, so that
// ties pick the same series from one scrape to the next.
func byLag(a, b subscriptionLag) int {
	return cmp.Or(cmp.Compare(b.lag, a.lag), cmp.Compare(a.stream, b.stream), cmp.Compare(a.subscription, b.subscription))
}
