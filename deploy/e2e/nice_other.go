//go:build !unix

package main

// niceness is not known off Unix.
func niceness() (int, bool) { return 0, false }
