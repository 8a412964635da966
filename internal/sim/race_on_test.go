//go:build race

package sim

// raceOn reports whether the test binary runs under the race detector.
const raceOn = true
