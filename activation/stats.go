package activation

// Stats is a snapshot of a pool's counters, for metrics.
type Stats struct {
	Processors      int // processors holding a run token (Config.Processors)
	QueuedGroups    int // groups waiting in run queues
	RunningWorkers  int // workers holding a processor, detached ones included
	SpinningWorkers int // running workers looking for work
	ParkedWorkers   int // workers parked without a processor
	BlockedTurns    int // turns in Exec.Wait or Exec.Blocking
	Workers         int // worker goroutines alive

	Steals           uint64 // successful steals from another processor's ring
	Handoffs         uint64 // processors handed on by a turn that waited
	HandOns          uint64 // processors taken from a long turn by the monitor
	LongTurnWarnings uint64 // long turns logged

	// TurnTime is the distribution of turn durations, sampled: about one
	// turn in TurnSampleEvery per worker is timed (see TurnHistogram).
	TurnTime TurnHistogram
}

// Stats returns the pool's counters. Any goroutine.
func (p *Pool) Stats() Stats {
	s := Stats{
		Processors:       p.cfg.Processors,
		SpinningWorkers:  int(p.nspinning.Load()),
		BlockedTurns:     int(p.blocked.Load()),
		Workers:          int(p.nworkers.Load()),
		HandOns:          p.handon.Load(),
		LongTurnWarnings: p.warned.Load(),
		QueuedGroups:     int(p.gqlen.Load()),
		TurnTime:         newTurnHistogram(),
	}
	if p.inbox.Load() != nil {
		s.QueuedGroups++
	}
	for _, pp := range *p.allp.Load() {
		s.Steals += pp.steals.Load()
		s.Handoffs += pp.handoffs.Load()
		s.TurnTime.add(&pp.turnTime)
		s.QueuedGroups += int(pp.runqtail.Load() - pp.runqhead.Load())
		if pp.next.Load() != nil {
			s.QueuedGroups++
		}
		if st := pp.status.Load(); st == pRunning || st == pDetached {
			s.RunningWorkers++
		}
	}
	p.mu.Lock()
	s.ParkedWorkers = len(p.spares)
	p.mu.Unlock()
	return s
}
