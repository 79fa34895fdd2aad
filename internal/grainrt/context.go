package grainrt

type contextKey struct{}

// ContextKey is the context value key under which a runtime's Context
// answers with itself, so grain.FromContext finds it inside derived
// contexts.
func ContextKey() any { return contextKey{} }
