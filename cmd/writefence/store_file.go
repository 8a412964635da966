//go:build unix

package main

import (
	"context"
	"errors"
	"io/fs"
	"net/url"
	"path/filepath"

	"github.com/writefence/writefence"
)

// filePath checks a file:// address and returns its directory. The root
// directory is refused: a store there would put lock and objects/ at /.
func filePath(u *url.URL) (string, error) {
	if (u.Host != "" && u.Host != "localhost") || u.Path == "" || u.RawQuery != "" {
		return "", usagef("writefence: store address: want file:///absolute/path, with three slashes and no parameters")
	}
	dir := filepath.Clean(u.Path)
	if dir == "/" {
		return "", usagef("writefence: store address: file:/// is the root directory; name a directory of its own, e.g. file:///var/lib/writefence")
	}
	return dir, nil
}

// openFile opens file:///path, a DirConditionalStore, for a command that
// writes. A directory that holds no store is not created here: its ready
// check reports it missing, and only init or -create (its create) makes
// it, so that a mistyped path never becomes a new store in which any
// epoch lands.
func openFile(_ context.Context, u *url.URL) (*opened, error) {
	dir, err := filePath(u)
	if err != nil {
		return nil, err
	}
	o := &opened{close: noClose}
	if _, err := writefence.NewDirConditionalStore(dir, &writefence.StoreOptions{ReadOnly: true}); errors.Is(err, fs.ErrNotExist) {
		addr := u.String()
		o.ready = func(context.Context) error { return &missingError{addr: addr, what: "directory", name: dir} }
		o.create = func(context.Context) error {
			s, err := writefence.NewDirConditionalStore(dir, nil)
			if err != nil {
				return err
			}
			o.store = s
			return nil
		}
		return o, nil
	}
	s, err := writefence.NewDirConditionalStore(dir, nil)
	if err != nil {
		return nil, err
	}
	o.store = s
	o.ready = func(context.Context) error { return nil }
	o.create = func(context.Context) error { return nil }
	return o, nil
}

// openFileRead opens an existing directory store for reading: no lock, no
// directory or file created, no write permission needed.
func openFileRead(_ context.Context, u *url.URL) (*opened, error) {
	dir, err := filePath(u)
	if err != nil {
		return nil, err
	}
	s, err := writefence.NewDirConditionalStore(dir, &writefence.StoreOptions{ReadOnly: true})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &advisedError{err, "check -store and $WRITEFENCE_STORE; writefence init -store " + shellQuote(u.String()) + " creates one"}
	}
	if err != nil {
		return nil, err
	}
	return &opened{store: s, close: noClose}, nil
}
