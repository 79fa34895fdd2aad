package adminapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Bounds of StreamsQuery.Limit.
const (
	// DefaultStreamLimit is how many streams a StreamsReport lists when
	// the query sets no limit.
	DefaultStreamLimit = 100
	// MaxStreamLimit is the most streams a StreamsReport lists.
	MaxStreamLimit = 10000
)

// StreamsQuery picks the streams a StreamsReport lists. The zero value
// lists the DefaultStreamLimit streams that most need an operator.
type StreamsQuery struct {
	// Prefix, when set, keeps the streams whose name
	// (provider/namespace/key) starts with it: "default/chat/" for a
	// namespace, a whole name for one stream (and those it prefixes).
	Prefix string
	// Parked keeps only the streams with a parked subscription.
	Parked bool
	// Limit bounds how many streams are listed: 1 to MaxStreamLimit, 0
	// for DefaultStreamLimit.
	Limit int
}

// Values is the query's URL query parameters: prefix, parked and limit,
// each left out when zero.
func (q StreamsQuery) Values() url.Values {
	v := url.Values{}
	if q.Prefix != "" {
		v.Set("prefix", q.Prefix)
	}
	if q.Parked {
		v.Set("parked", "true")
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// StreamsReport lists streams active in the cluster (PathStreams), or on
// one silo (PathSiloStreams), with their subscriptions.
type StreamsReport struct {
	// Asked is the member (or name) of the silo that gathered the report.
	Asked string `json:"asked"`
	// Total counts the streams that match the query on the silos that
	// answered, listed or not.
	Total int `json:"total"`
	// Streams are at most the query's limit of them, those that most need
	// an operator first: with parked subscriptions, then with the most
	// events waiting, then by name.
	Streams []StreamReport `json:"streams"`
	// Unreachable lists the members that did not answer, and why: their
	// streams are left out.
	Unreachable []Unreachable `json:"unreachable,omitempty"`
}

// StreamReport is one stream active on a silo.
type StreamReport struct {
	// Stream is the stream's name, provider/namespace/key.
	Stream string `json:"stream"`
	// Silo is the member (or name) of the silo the stream is active on.
	Silo string `json:"silo"`
	// Type is the full name of the events' message type, once known.
	Type string `json:"type,omitempty"`
	// Last is the token of the last event published to the stream's
	// activation, "EPOCH.SEQUENCE"; empty when none was. Tokens are
	// strings: an epoch is past what a JSON number holds exactly.
	Last string `json:"last,omitempty"`
	// Lag is how many events wait for the stream's subscribers, summed
	// over its subscriptions; Parked counts its parked subscriptions.
	Lag    int `json:"lag"`
	Parked int `json:"parked"`
	// SubscriptionCount counts the stream's subscriptions. Subscriptions
	// lists them, parked ones first, then those with the most events
	// waiting: every one in a StreamsReport, the first few in a
	// StreamsSummary.
	SubscriptionCount int                  `json:"subscription_count"`
	Subscriptions     []SubscriptionReport `json:"subscriptions"`
}

// SubscriptionReport is one subscription of a stream.
type SubscriptionReport struct {
	// ID names the subscription within its stream: what Unpark takes.
	ID string `json:"id"`
	// Grain is the subscriber, TYPE/KEY, and Handler the name of its
	// type's handler that takes the events.
	Grain   string `json:"grain"`
	Handler string `json:"handler"`
	// Implicit: the subscription follows from the subscriber type's
	// registration, and cannot be unsubscribed.
	Implicit bool `json:"implicit,omitempty"`
	// Lag is how many events wait for the subscriber.
	Lag int `json:"lag"`
	// Handled is the token of the last event the subscriber handled,
	// "EPOCH.SEQUENCE"; empty when none was.
	Handled string `json:"handled,omitempty"`
	// Parked: delivery to the subscriber failed past its provider's
	// retries, at ParkedAt, because of ParkedReason, and stopped until
	// the subscription is unparked.
	Parked       bool       `json:"parked"`
	ParkedReason string     `json:"parked_reason,omitempty"`
	ParkedAt     *time.Time `json:"parked_at,omitempty"`
}

// StreamsSummary sums up the streams active on a silo, or on the
// cluster's silos.
type StreamsSummary struct {
	// Active counts the streams active, Subscriptions their
	// subscriptions, Parked those parked, and Lag the events waiting for
	// them.
	Active        int `json:"active"`
	Subscriptions int `json:"subscriptions"`
	Parked        int `json:"parked"`
	Lag           int `json:"lag"`
	// Published, Delivered, Dropped and Retried count since the silo
	// started: events published, events subscribers handled and events
	// not delivered to a subscriber (both once per subscriber), and
	// deliveries tried again.
	Published uint64 `json:"published"`
	Delivered uint64 `json:"delivered"`
	Dropped   uint64 `json:"dropped"`
	Retried   uint64 `json:"retried"`
	// PublishRate, DeliveryRate and DropRate are per second, over the
	// last sampling interval.
	PublishRate  float64 `json:"publish_rate"`
	DeliveryRate float64 `json:"delivery_rate"`
	DropRate     float64 `json:"drop_rate"`
	// Top are the streams that most need an operator, in the order of
	// StreamsReport.Streams: a few a silo, a few more for the cluster,
	// each with its first few subscriptions. PathStreams lists them all.
	Top []StreamReport `json:"top"`
}

// Unparked answers an unpark request: the subscription, now delivered to
// again.
type Unparked struct {
	Stream       string `json:"stream"`
	Subscription string `json:"subscription"`
	Grain        string `json:"grain"`
	Handler      string `json:"handler"`
	Implicit     bool   `json:"implicit,omitempty"`
}

// Streams lists the streams active in the cluster that q picks, as
// gathered by the silo the Client speaks to.
func (c *Client) Streams(ctx context.Context, q StreamsQuery) (StreamsReport, error) {
	var r StreamsReport
	err := c.call(ctx, http.MethodGet, PathStreams, q.Values(), &r)
	return r, err
}

// SiloStreams lists the streams that q picks among those active on the
// silo the Client speaks to.
func (c *Client) SiloStreams(ctx context.Context, q StreamsQuery) (StreamsReport, error) {
	var r StreamsReport
	err := c.call(ctx, http.MethodGet, PathSiloStreams, q.Values(), &r)
	return r, err
}

// Unpark resumes delivery to the parked subscription of stream
// (provider/namespace/key), wherever the stream is active: a memory
// stream's subscriber gets the events published from then on, a durable
// stream's resumes from its cursor. Unparking a subscription that is not
// parked changes nothing.
func (c *Client) Unpark(ctx context.Context, stream, subscription string) (Unparked, error) {
	var r Unparked
	switch {
	case stream == "":
		return r, errors.New("adminapi: Unpark: empty stream; want PROVIDER/NAMESPACE/KEY")
	case subscription == "":
		return r, errors.New("adminapi: Unpark: empty subscription ID")
	}
	err := c.call(ctx, http.MethodPost, PathUnpark, url.Values{"stream": {stream}, "subscription": {subscription}}, &r)
	return r, err
}
