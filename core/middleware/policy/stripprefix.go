package policy

import (
	"bytes"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// StripPrefix is the strip-prefix middleware: the first of its prefixes that matches the
// request path at a segment boundary is removed before the request goes upstream, and the
// upstream is told the prefix in X-Forwarded-Prefix (as Traefik and Spring read it) so that it
// can build links that go through the gateway. Routing already happened on the full path.
type StripPrefix struct {
	prefixes [][]byte
}

var (
	hdrForwardedPrefix = []byte("X-Forwarded-Prefix")
	rootPath           = []byte("/")
)

// NewStripPrefix compiles a strip-prefix middleware. A prefix written with a trailing '/'
// is matched without it.
func NewStripPrefix(o config.StripPrefixOptions) *StripPrefix {
	s := &StripPrefix{}
	for _, p := range o.Prefixes {
		if len(p) > 1 && p[len(p)-1] == '/' {
			p = p[:len(p)-1]
		}
		s.prefixes = append(s.prefixes, []byte(p))
	}
	return s
}

// LoopSafe implements pipeline.LoopSafe: a prefix compared and the path resliced.
func (s *StripPrefix) LoopSafe() bool { return true }

// OnRequest implements pipeline.RequestStage. The new path is a part of the old one (or
// "/"), so nothing is copied.
func (s *StripPrefix) OnRequest(rc *pipeline.RequestCtx) error {
	path := rc.Req.Path
	for _, p := range s.prefixes {
		if !bytes.HasPrefix(path, p) {
			continue
		}
		rest := path[len(p):]
		switch {
		case len(rest) == 0:
			rc.Req.Path = rootPath
		case rest[0] == '/':
			rc.Req.Path = rest
		default:
			continue // "/apix" is not under "/api"
		}
		rc.RemoveRequestHeader(hdrForwardedPrefix)
		rc.AddUpstreamHeader(hdrForwardedPrefix, p)
		return nil
	}
	return nil
}
