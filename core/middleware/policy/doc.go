// Package policy holds the HTTP policy middlewares, one file each: headers (fields set and
// removed on either side), strip-prefix (a path prefix removed before the upstream),
// cors (the Fetch standard's CORS protocol, preflights answered by the gateway), ip-allow
// (a client address allow-list) and body-limit (a request body bound per router). Each is a
// pipeline stage compiled from its config.<Type>Options; a stage keeps no per-request state
// and allocates nothing per request once warm.
package policy

import "github.com/sluice-gw/sluice/core/consumer"

// errForbidden and errOriginRefused are the refusals of ip-allow and a cors preflight, in the
// OpenAI SDKs' shape (Anthropic's on /v1/messages).
var (
	errForbidden = consumer.NewAnswer(403, "permission_error", "permission_error", "ip_not_allowed",
		"the client address is not allowed on this route")
	errOriginRefused = consumer.NewAnswer(403, "permission_error", "permission_error", "cors_origin_not_allowed",
		"this origin may not call this route (CORS)")
)
