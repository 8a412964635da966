package promise

import "fmt"

// checkObservedWhen judges promise 27's "when it ends" on the events a
// recorder placed (Event.Place). Each comes during its call. Of each key
// the Observer names for the call, every write (its put or create) and
// each fault of a write (a race lost, a lost reply, a refusal, a transient
// failure) is seen ending after it; each race lost is seen, retried or
// ending, after it and before the call writes the key again; and in a
// history that records the races lost of the key, each retry is seen
// right after one, before any other write of the key. (A Lease's renewer
// aside: see cut.)
func (c *Checker) checkObservedWhen(idx int, fl *flight) {
	call := fl.call
	ends := map[string][]int{} // per key: the places of the events that end a write
	all := map[string][]int{}  // per key: the places of every event
	for _, e := range call.Events {
		if e.Place == 0 {
			continue
		}
		if e.Place > idx || e.Place <= fl.begin && fl.begin < idx {
			c.report(idx, 27, "%s: the Observer saw its %s of %s at entry %d, outside the call (entries %d to %d)", who(call), e.Op, quote(e.Key), e.Place, fl.begin, idx)
		}
		all[e.Key] = append(all[e.Key], e.Place)
		if !e.Retrying {
			ends[e.Key] = append(ends[e.Key], e.Place)
		}
	}
	if len(all) == 0 {
		return
	}
	// A Lease's renewer runs beside the Hold or Acquire that took it, under
	// its ctx, once the acquisition landed: the writes of its record after
	// the first end seen after a put of it may be the renewer's, seen
	// ending once the call ended, and are not judged.
	cut := map[string]int{} // per lease key of such a call: that end's place
	if call.Op == Hold || call.Op == Acquire {
		for _, w := range fl.made {
			if class, _ := c.classify(w.ch.Key); class != classLease || w.ch.Kind != "put" {
				continue
			}
			for _, p := range ends[w.ch.Key] {
				if p > w.at && (cut[w.ch.Key] == 0 || p < cut[w.ch.Key]) {
					cut[w.ch.Key] = p
				}
			}
		}
	}
	// The call's writes of the keys the Observer names, in order.
	var writes []write
	for _, w := range fl.made {
		if at, ok := cut[w.ch.Key]; all[w.ch.Key] != nil && writeAttempt(w.ch) && (!ok || w.at < at) {
			writes = append(writes, w)
		}
	}
	raced := map[string]bool{}
	for i, w := range writes {
		key := w.ch.Key
		if !placedIn(ends[key], w.at, idx) {
			c.report(idx, 27, "%s made a %s of %s (entry %d), and the Observer saw no write of it end after that", who(call), writeOf(w.ch), quote(key), w.at)
		}
		if w.ch.Fault != "conflict" {
			continue
		}
		raced[key] = true
		for _, next := range writes[i+1:] {
			if next.ch.Key == key {
				if !placedIn(all[key], w.at, next.at) {
					c.report(idx, 27, "%s lost a race of %s (entry %d) and wrote it again (entry %d) before the Observer saw it retried", who(call), quote(key), w.at, next.at)
				}
				break
			}
		}
	}
	for _, e := range call.Events {
		if at, ok := cut[e.Key]; e.Place == 0 || !e.Retrying || !raced[e.Key] || ok && e.Place > at {
			continue
		}
		var last *Change // the call's last write of the key before the event
		for _, w := range writes {
			if w.ch.Key == e.Key && w.at < e.Place {
				last = w.ch
			}
		}
		if last == nil || last.Fault != "conflict" {
			c.report(idx, 27, "%s: the Observer saw a race of %s lost and retried at entry %d, where no race of it lost came last", who(call), quote(e.Key), e.Place)
		}
	}
}

// writeAttempt reports whether ch is a write, or the fault of one.
func writeAttempt(ch *Change) bool {
	switch ch.Kind {
	case "put", "create blob":
		return true
	case "fault":
		switch ch.Fault {
		case "conflict", "lost", "denied":
			return true
		case "transient":
			return ch.Request == "put" || ch.Request == "create blob"
		}
	}
	return false
}

// placedIn reports whether one of places is after entry from and before
// entry to: an event placed at p comes after entry p-1.
func placedIn(places []int, from, to int) bool {
	for _, p := range places {
		if p > from && p <= to {
			return true
		}
	}
	return false
}

// writeOf names a write, or the fault of one, in a message.
func writeOf(ch *Change) string {
	if ch.Kind == "fault" {
		return fmt.Sprintf("write that failed (%s)", ch.Fault)
	}
	return ch.Kind
}
