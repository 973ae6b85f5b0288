package policy

import (
	"net/netip"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/pipeline"
)

// IPAllow is the ip-allow middleware: a request whose client address is in none of its
// networks is answered 403 and goes no further. The client address is the peer's, or behind
// a peer in the entrypoint's trusted_ips the one it forwarded (pipeline.RequestCtx.ClientAddr).
type IPAllow struct {
	nets []netip.Prefix
}

// NewIPAllow compiles an ip-allow middleware.
func NewIPAllow(o config.IPAllowOptions) *IPAllow {
	return &IPAllow{nets: append([]netip.Prefix(nil), o.SourceRange...)}
}

// LoopSafe implements pipeline.LoopSafe: an address tested against its networks.
func (s *IPAllow) LoopSafe() bool { return true }

// OnRequest implements pipeline.RequestStage.
func (s *IPAllow) OnRequest(rc *pipeline.RequestCtx) error {
	a := rc.ClientAddr()
	for _, p := range s.nets {
		if p.Contains(a) {
			return nil
		}
	}
	return errForbidden.Reply(rc)
}
