package writefence

import "time"

// Held reports the term this Lease holds and when it expires by the Lease's
// Clock, unless a renewal lands first; ok is false, with zero values, when it
// holds none. An expiry in the past means renewals have not landed: Epoch
// refuses, and a contender may take the lease over at any moment. Held makes
// no I/O and never waits for a write in flight.
func (l *Lease) Held() (term uint64, expiry time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return 0, time.Time{}, false
	}
	return l.term, l.expiry, true
}
