package placement

import "fmt"

// Config configures a Placer. Start from DefaultConfig and change what you
// need; New rejects a Config with a field out of range and names it.
type Config struct {
	// Default is the strategy of requests whose Strategy is Default: the
	// silo maps grain.PlacementDefault there, so this is the cluster-wide
	// choice for grain types that name none. It must be Random,
	// PreferLocal, Hash or ActivationCount: SiloRole needs a role that
	// only a grain type can name, and StatelessWorker is a property of a
	// type, not a placement. Default Random, as in Orleans.
	Default Strategy

	// Seed seeds the Placer's random choices. 0 uses the process's
	// random source (math/rand/v2's top-level functions, which need no
	// lock); any other value makes a Placer that, driven by the same calls
	// from one goroutine, makes the same choices every run, which is what
	// tests want. A seeded Placer serialises its draws on a mutex.
	// Default 0.
	Seed uint64
}

// DefaultConfig returns the configuration described on each field.
func DefaultConfig() Config {
	return Config{Default: Random}
}

// ConfigError names the field of a Config that is out of range.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "placement: config: " + e.Field + ": " + e.Reason }

func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch c.Default {
	case Random, PreferLocal, Hash, ActivationCount:
	case Default:
		return bad("Default", "must name a strategy (random, prefer_local, hash or activation_count), not default")
	case SiloRole:
		return bad("Default", "silo_role needs a role, which only a grain type can name")
	case StatelessWorker:
		return bad("Default", "stateless_worker is a kind of grain type, not a default placement")
	default:
		return bad("Default", "unknown strategy %s", c.Default)
	}
	return nil
}
