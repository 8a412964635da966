// Package probecheck names the checks of writefence.Probe, in the order
// they run, for the library and its command.
package probecheck

// The checks; ProbeError.Check is one of them.
const (
	Create         = "create-only put lands"
	CreateRefused  = "second create-only put is refused"
	Update         = "update with the current version lands"
	StaleRefused   = "stale update is refused"
	MissingRefused = "update of a missing key is refused"
	ReadBack       = "read returns what was written"
	ForeignRefused = "write under another brand is refused"
)

// All lists the checks in the order they run.
var All = []string{Create, CreateRefused, Update, StaleRefused, MissingRefused, ForeignRefused, ReadBack}
