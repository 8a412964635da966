//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package writefence

import (
	"errors"
	"os"
	"syscall"
)

// dirHasFlock says that this system has flock(2).
const dirHasFlock = true

// dirTryLock tries once to take an exclusive flock(2) on f. It returns
// false, and no error, when another open file holds the lock.
func dirTryLock(f *os.File) (bool, error) {
	for {
		switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err {
		case nil:
			return true, nil
		case syscall.EWOULDBLOCK:
			return false, nil
		case syscall.EINTR:
		default:
			return false, err
		}
	}
}

// dirUnlock drops the flock(2) that f holds.
func dirUnlock(f *os.File) error {
	for {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != syscall.EINTR {
			return err
		}
	}
}

// dirReadOnlyFS reports whether err is the refusal of a file system
// mounted read-only.
func dirReadOnlyFS(err error) bool { return errors.Is(err, syscall.EROFS) }
