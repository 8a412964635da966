package zkepoch

import (
	"slices"
	"strings"
)

// LeadOrder returns the names of the candidates among children in the
// order they lead.
func LeadOrder(children []string) []string {
	var out []string
	for _, c := range children {
		if _, ok := sequence(c); ok && strings.HasPrefix(c, "_c_") {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		sa, _ := sequence(a)
		sb, _ := sequence(b)
		return int(sa - sb)
	})
	return out
}
