//go:build !unix

package main

import (
	"errors"
	"io"
	"os"
	"syscall"
)

var forwardedSignals = []os.Signal{os.Interrupt}

func terminatingSignal(os.Signal) bool { return true }

type proc struct{}

// startProc refuses: exec stops its program through process groups and
// signals, which it has on unix systems only.
func startProc(string, []string, []string, io.Reader, io.Writer, io.Writer) (*proc, error) {
	return nil, errors.New("writefence exec: needs a unix system (process groups and signals)")
}

func (*proc) Signal(syscall.Signal) error { return nil }
func (*proc) Done() <-chan struct{}       { return nil }
func (*proc) Status() int                 { return 0 }
func (*proc) Pid() int                    { return 0 }
