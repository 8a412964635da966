//go:build (!writefence_nominio || !writefence_nogcs) && !writefence_nosdk

package writefence

// The object-store adapters' read limit, built with them.

// readLimit returns a store's read limit: maxObjectSize, its configured
// limit, or defaultMaxObjectSize when that is zero or less.
func readLimit(maxObjectSize int64) int64 {
	if maxObjectSize > 0 {
		return maxObjectSize
	}
	return defaultMaxObjectSize
}
