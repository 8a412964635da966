//go:build !unix

package main

import (
	"context"
	"errors"
	"net/url"
)

// openFile refuses: the directory store relies on flock(2), found on unix
// systems only.
func openFile(context.Context, *url.URL) (*opened, error) {
	return nil, errors.New("writefence: file:// stores need a unix system; use another -store")
}

func openFileRead(ctx context.Context, u *url.URL) (*opened, error) { return openFile(ctx, u) }
