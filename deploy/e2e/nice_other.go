//go:build !linux

package main

// niceness is read on Linux only, whose getpriority differs from the
// others'.
func niceness() (int, bool) { return 0, false }
