package writefence

import "time"

// Held reports the term this Lease holds and when that term expires by
// the Lease's Clock, unless a renewal lands first: ok is false, with
// term 0 and a zero expiry, when the Lease holds no lease (never
// acquired, released, lost). An expiry in the past means renewals have
// not landed: Epoch refuses, and a contender whose clock agrees may take
// the lease over at any moment. A supervisor that must stop work before
// its term can end reads the expiry here, as it moves with every renewal.
// Held makes no I/O and never waits for a write in flight.
func (l *Lease) Held() (term uint64, expiry time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return 0, time.Time{}, false
	}
	return l.term, l.expiry, true
}
