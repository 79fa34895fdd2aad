package main

import "syscall"

// niceness is the test process's nice value, and false when it cannot be
// read.
func niceness() (int, bool) {
	// Linux's system call returns 20 minus the nice value, so that its
	// results are never negative.
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		return 0, false
	}
	return 20 - p, true
}
