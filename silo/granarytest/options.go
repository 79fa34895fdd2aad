package granarytest

import "github.com/granaryio/granary/silo"

// An Option changes how New builds a Cluster.
type Option func(*options)

type options struct {
	silos     int
	register  []func(*silo.Silo) error
	configure []func(*silo.Config)
	gateway   bool
	realClock bool
}

// Silos sets how many silos New starts: at least 1. Default 1.
func Silos(n int) Option { return func(o *options) { o.silos = n } }

// Register registers grain types on every silo, those New starts and
// those StartSilo adds, before the silo starts. fn is typically a
// closure over generated RegisterXGrain functions, which take the silo as
// their grain.Registrar:
//
//	granarytest.Register(func(s *silo.Silo) error {
//		return hellopb.RegisterGreeterGrain(s, newGreeter)
//	})
//
// fn gets the *silo.Silo rather than a grain.Registrar so that it can
// call a program's own registration function, which often takes the
// silo (to name it in replies, say). Options accumulate: each Register
// adds its types.
func Register(fn func(s *silo.Silo) error) Option {
	return func(o *options) { o.register = append(o.register, fn) }
}

// Configure changes each silo's configuration before the silo is made:
// after the cluster's own settings (Name, Clock, Cluster, Storage,
// Reminders, and Gateway with the Gateway option), so fn may change them;
// fn tells silos apart by cfg.Name ("silo0", "silo1", ...; a name it
// sets shows in logs and Info). It must leave cfg.Cluster set, with its
// seams (Listener, Network, NewMembership), and should leave Clock as it
// is. Options accumulate, applied in order.
func Configure(fn func(cfg *silo.Config)) Option {
	return func(o *options) { o.configure = append(o.configure, fn) }
}

// Gateway makes every silo serve a gateway for external clients, on a
// loopback port picked at random: see Cluster.Client.
func Gateway() Option { return func(o *options) { o.gateway = true } }

// WithRealClock runs the silos on the real clock instead of the shared
// fake one: timers, reminders, call timeouts and idle collection happen in
// real time, and Advance fails the test. For tests that need time to pass
// by itself, such as one that waits for a call to time out while it
// blocks.
func WithRealClock() Option { return func(o *options) { o.realClock = true } }
