package policy

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// CORS is the cors middleware: the gateway speaks the CORS protocol of the Fetch standard
// (§3.2) for the route, so that browser applications on the allowed origins can call it.
//
//   - A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered by the
//     gateway: 204 with the allowed methods, fields and max age for an allowed origin, 403 for
//     another. It never reaches the upstream.
//   - Any other request with an allowed Origin gets Access-Control-Allow-Origin (and
//     -Credentials, -Expose-Headers) on its response, also on the gateway's own error replies,
//     so that a script can read a 401 or a 429.
//   - The upstream's own Access-Control-* response fields are removed: the route's policy is
//     the gateway's, and two Access-Control-Allow-Origin fields make browsers refuse both.
//
// Every answer of the route varies by Origin (Vary: Origin), also one to a request without
// Origin, so that a cache hands neither one origin's answer to another nor an answer without
// CORS fields to a script's request (Fetch standard §3.2.5).
type CORS struct {
	any         bool
	origins     [][]byte
	credentials bool
	methods     []byte
	headers     []byte
	expose      []byte
	maxAge      []byte
}

var (
	hdrVary          = []byte("Vary")
	hdrACAO          = []byte("Access-Control-Allow-Origin")
	hdrACAC          = []byte("Access-Control-Allow-Credentials")
	hdrACAM          = []byte("Access-Control-Allow-Methods")
	hdrACAH          = []byte("Access-Control-Allow-Headers")
	hdrACEH          = []byte("Access-Control-Expose-Headers")
	hdrACMA          = []byte("Access-Control-Max-Age")
	hdrACAPN         = []byte("Access-Control-Allow-Private-Network")
	valOrigin        = []byte("Origin")
	valTrue          = []byte("true")
	valStar          = []byte("*")
	upstreamCORSKeys = [][]byte{hdrACAO, hdrACAC, hdrACAM, hdrACAH, hdrACEH, hdrACMA, hdrACAPN}
)

// NewCORS compiles a cors middleware.
func NewCORS(o config.CORSOptions) *CORS {
	c := &CORS{credentials: o.AllowCredentials}
	for _, s := range o.AllowOrigins {
		if s == "*" {
			c.any = true
			continue
		}
		c.origins = append(c.origins, []byte(s))
	}
	c.methods = []byte(strings.Join(o.AllowMethods, ", "))
	c.headers = []byte(strings.Join(o.AllowHeaders, ", "))
	c.expose = []byte(strings.Join(o.ExposeHeaders, ", "))
	c.maxAge = strconv.AppendInt(nil, int64(o.MaxAge.Seconds()), 10)
	return c
}

// LoopSafe implements pipeline.LoopSafe: an origin compared with a short list, fields added,
// a preflight answered at once.
func (c *CORS) LoopSafe() bool { return true }

func (c *CORS) allowed(origin []byte) bool {
	if c.any {
		return true
	}
	for _, o := range c.origins {
		if bytes.Equal(o, origin) {
			return true
		}
	}
	return false
}

// allowOrigin adds the field that lets origin read the response.
func (c *CORS) allowOrigin(rc *pipeline.RequestCtx, origin []byte) {
	if c.any && !c.credentials {
		rc.AddResponseHeader(hdrACAO, valStar)
	} else {
		rc.AddResponseHeader(hdrACAO, origin)
	}
	if c.credentials {
		rc.AddResponseHeader(hdrACAC, valTrue)
	}
}

// OnRequest implements pipeline.RequestStage.
func (c *CORS) OnRequest(rc *pipeline.RequestCtx) error {
	rc.AddResponseHeader(hdrVary, valOrigin)
	origin, ok := rc.Req.HeaderValue("Origin")
	if !ok {
		return nil
	}
	_, preflight := rc.Req.HeaderValue("Access-Control-Request-Method")
	preflight = preflight && string(rc.Req.Method) == "OPTIONS"
	if !c.allowed(origin) {
		if preflight {
			return errOriginRefused.Reply(rc)
		}
		return nil
	}
	c.allowOrigin(rc, origin)
	if !preflight {
		if len(c.expose) > 0 {
			rc.AddResponseHeader(hdrACEH, c.expose)
		}
		return nil
	}
	rc.AddResponseHeader(hdrACAM, c.methods)
	rc.AddResponseHeader(hdrACAH, c.headers)
	rc.AddResponseHeader(hdrACMA, c.maxAge)
	return rc.Reply(204, "", nil)
}

// OnResponse implements pipeline.ResponseStage: the upstream's CORS fields go.
func (c *CORS) OnResponse(rc *pipeline.RequestCtx) error {
	for _, k := range upstreamCORSKeys {
		rc.RemoveResponseHeader(k)
	}
	return nil
}
