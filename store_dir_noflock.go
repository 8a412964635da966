//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package writefence

import (
	"fmt"
	"os"
	"runtime"
)

// dirLockUnsupported says why the directory store cannot work here: it
// needs flock(2), which this system lacks.
func dirLockUnsupported() error {
	return fmt.Errorf("the directory store cannot lock files on %s", runtime.GOOS)
}

// dirTryLock is never reached: the constructors refuse first.
func dirTryLock(*os.File) (bool, error) { return false, dirLockUnsupported() }

// dirUnlock is never reached: the constructors refuse first.
func dirUnlock(*os.File) error { return dirLockUnsupported() }
