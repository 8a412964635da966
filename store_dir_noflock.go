//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package writefence

import "os"

// dirHasFlock says that this system lacks flock(2): the constructors
// refuse, so the functions below are never reached.
const dirHasFlock = false

func dirTryLock(*os.File) (bool, error) { return false, errNoFlock() }

func dirUnlock(*os.File) error { return errNoFlock() }

func dirReadOnlyFS(error) bool { return false }
