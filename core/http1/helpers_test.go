package http1

import (
	"errors"
	"testing"
)

// statusOf returns the *Error status of err, 0 for nil, -1 for ErrNeedMore, -2 otherwise.
func statusOf(err error) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, ErrNeedMore) {
		return -1
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return -2
}

// parseReq finds the head in raw and parses it with lim.
func parseReq(t testing.TB, raw string, lim *Limits) (*Request, error) {
	t.Helper()
	b := []byte(raw)
	skip, n := FindHeadEnd(b)
	if n < 0 {
		return nil, ErrNeedMore
	}
	r := new(Request)
	err := r.ParseRequestHead(b[skip:skip+n], lim)
	return r, err
}

func parseResp(t testing.TB, raw string) (*Response, error) {
	t.Helper()
	b := []byte(raw)
	skip, n := FindHeadEnd(b)
	if n < 0 {
		return nil, ErrNeedMore
	}
	r := new(Response)
	err := r.ParseResponseHead(b[skip:skip+n], nil)
	return r, err
}
