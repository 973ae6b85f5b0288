package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/steps"
	"github.com/stretchr/testify/require"
)

// doc joins lines with "\n", so that a test's line numbers are its indexes + 1.
func doc(lines ...string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }

// minimal is a valid config of 6 lines; cases append to it, so their own
// lines start at line 7.
var minimal = []string{
	`services.s.load_balancer.servers = [{ url = "http://127.0.0.1:8000" }]`, // 1
	`[entrypoints.web]`,                  // 2
	`address = "127.0.0.1:8080"`,         // 3
	`[routers.r]`,                        // 4
	`rule = "PathPrefix(` + "`/`" + `)"`, // 5
	`service = "s"`,                      // 6
}

func withMinimal(extra ...string) []byte {
	return doc(append(append([]string(nil), minimal...), extra...)...)
}

func TestLoadErrorPositions(t *testing.T) {
	t.Setenv("SLUICE_TEST_SET", "v")
	t.Setenv("SLUICE_TEST_SECRET", strings.Repeat("s", 32))
	t.Setenv("SLUICE_TEST_HOSTPORT", "10.9.8.7:8123")
	cases := []struct {
		name string
		data []byte
		want []string // exact error lines, sorted by position
	}{
		{
			name: "syntax error: unterminated string",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8080`),
			want: []string{`t.toml:2:26: entrypoints.web.address: the string is not closed on its line: end it with " (a " inside it is written \"; text over several lines goes between """ and """)`},
		},
		{
			name: "not UTF-8: a Latin-1 byte where a key starts",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8080"`, "\xff = 1"),
			want: []string{`t.toml:3:1: the file is not valid UTF-8: byte 0xFF (TOML 1.0.0: a TOML file must be a valid UTF-8 encoded Unicode document; save it as UTF-8)`},
		},
		{
			name: "not UTF-8: in a comment, and a sequence cut short in a string",
			data: doc("# caf\xe9", `[entrypoints.web]`, "address = \"127.0.0.1:80\xc3\""),
			want: []string{`t.toml:1:6: the file is not valid UTF-8: byte 0xE9 (TOML 1.0.0: a TOML file must be a valid UTF-8 encoded Unicode document; save it as UTF-8)`},
		},
		{
			name: "not UTF-8 after a byte order mark: columns count from after it",
			data: []byte("\xef\xbb\xbf[entrypoints.web]\naddress = \"x\xc3\"\n"),
			want: []string{`t.toml:2:13: the file is not valid UTF-8: byte 0xC3 (TOML 1.0.0: a TOML file must be a valid UTF-8 encoded Unicode document; save it as UTF-8)`},
		},
		{
			name: "a number too large for TOML names what the key wants",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8080"`, `max_connections = 99999999999999999999999`),
			want: []string{`t.toml:3:19: entrypoints.web.max_connections: the number is too large for TOML (64-bit integers, double-precision floats); the key wants an integer of 0 or more`},
		},
		{
			name: "a value of the wrong type is reported once, not again as the empty value left in its place",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8080"`, `[routers.r]`, "rule = \"PathPrefix(`/`)\"", `service = "up"`,
				`entrypoints = [5]`, `middlewares = [true]`, `[services.up.load_balancer]`, `servers = [{ url = "http://127.0.0.1:9" }]`,
				`health_check = { path = 7 }`),
			want: []string{
				`t.toml:6:16: routers.r.entrypoints[0] must be a string, not an integer (a TOML string is quoted: "5")`,
				`t.toml:7:16: routers.r.middlewares[0] must be a string, not a boolean (a TOML string is quoted: "true")`,
				`t.toml:10:25: services.up.load_balancer.health_check.path must be a string, not an integer (a TOML string is quoted: "7")`,
			},
		},
		{
			name: "a models key of the wrong type does not also ask for a service",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8080"`, `[routers.m]`, "rule = \"PathPrefix(`/v1`)\"", `models = "yes"`),
			want: []string{`t.toml:5:10: routers.m.models must be a boolean such as true, not a string`},
		},
		{
			name: "a certificate file of the wrong type is not also missing",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8443"`, `tls = { certificates = [{ cert_file = 5, key_file = "/k.pem" }] }`),
			want: []string{`t.toml:3:39: entrypoints.web.tls.certificates[0].cert_file must be a string, not an integer (a TOML string is quoted: "5")`},
		},
		{
			// Neither key is written: the first one's problem, at the element (the position
			// both fall back to), does not pass for the second one's.
			name: "a certificate with neither file has both reported",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8443"`, `tls = { certificates = [{}] }`),
			want: []string{
				`t.toml:3:25: entrypoints.web.tls.certificates[0].cert_file is required (PEM certificate chain)`,
				`t.toml:3:25: entrypoints.web.tls.certificates[0].key_file is required (PEM private key)`,
			},
		},
		{
			name: "a control character in a string is named as one, not as bad UTF-8",
			data: doc(`[entrypoints.web]`, "address = \"127.0.0.1:80\x0080\""),
			want: []string{`t.toml:2:24: entrypoints.web.address: control character 0x00 in a string (TOML 1.0.0: control characters other than tab must be escaped, as \u0000)`},
		},
		{
			name: "a float too large for TOML",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8080"`, `max_header_bytes = 1e400`),
			want: []string{`t.toml:3:20: entrypoints.web.max_header_bytes: the number is too large for TOML (64-bit integers, double-precision floats); the key wants an integer from 1024 to 1048576`},
		},
		{
			name: "duplicate key",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8080"`, `address = "127.0.0.1:8081"`),
			want: []string{`t.toml:3:1: key entrypoints.web.address is already defined at t.toml:2:1`},
		},
		{
			name: "duplicate table",
			data: doc(`[entrypoints.web]`, `address = "127.0.0.1:8080"`, ``, `[entrypoints.web]`, `engine = "gnet"`),
			want: []string{`t.toml:4:14: table [entrypoints.web] is already defined at t.toml:1:14`},
		},
		{
			name: "table reopened after dotted keys",
			data: doc(`[entrypoints]`, `web.address = "127.0.0.1:8080"`, `[entrypoints.web]`, `engine = "gnet"`),
			want: []string{`t.toml:3:14: key entrypoints.web is already defined at t.toml:2:1`},
		},
		{
			name: "unknown key with suggestion",
			data: withMinimal(`[entrypoints.api]`, `adress = "127.0.0.1:8081"`),
			want: []string{
				`t.toml:7:14: entrypoints.api.address is required (host:port to listen on)`,
				`t.toml:8:1: unknown key "adress" in [entrypoints.api] (did you mean "address"?)`,
			},
		},
		{
			name: "unknown key without suggestion lists the known keys",
			data: withMinimal(`[log]`, `colour = true`),
			want: []string{`t.toml:8:1: unknown key "colour" in [log] (known keys: access_log, access_log_sample, format, level)`},
		},
		{
			name: "a scaled service lists no servers; kube needs its table",
			data: withMinimal(`[services.s.scaling]`, `executor = "kube"`, `max_replicas = 3`, `[models.chat.scheduling]`, `phase = "decode"`),
			want: []string{
				`t.toml:1:26: services.s.load_balancer.servers: the replicas of a scaled service are its servers; remove the list`,
				`t.toml:7:13: services.s.scaling: executor "kube" needs [services.s.scaling.kube] with deployment, service and url`,
				`t.toml:10:9: models.chat: a model needs at least one target ([models.chat.targets.<id>] with a service)`,
				`t.toml:11:9: models.chat.scheduling.phase = "decode" needs [models.chat.scheduling.distributed_serving] with api_key_env (the workers' key)`,
			},
		},
		{
			name: "mirror keys out of range",
			data: withMinimal(`[services.s.mirror]`, `service = "s"`, `percentage = 101`, `queue_size = 0`, `max_concurrent = 5000`, `max_bytes = 1024`, `[services.u.mirror]`, `service = "x"`, `[services.v.mirror]`, `percentage = 3`),
			want: []string{
				`t.toml:8:11: services.s.mirror.service: a service cannot mirror to itself`,
				`t.toml:9:14: services.s.mirror.percentage 101: want 0..100`,
				`t.toml:10:14: services.s.mirror.queue_size 0: want 1..65536`,
				`t.toml:11:18: services.s.mirror.max_concurrent 5000: want 1..1024`,
				`t.toml:12:13: services.s.mirror.max_bytes 1024: want 65536..1099511627776`,
				`t.toml:13:11: services.u has no load_balancer: add [services.u.load_balancer] with servers = [{ url = "http://host:port" }]`,
				`t.toml:14:11: services.u.mirror.service: no service named "x" (did you mean "s"?)`,
				`t.toml:15:11: services.v has no load_balancer: add [services.v.load_balancer] with servers = [{ url = "http://host:port" }]`,
				`t.toml:15:13: services.v.mirror.service is required (the name of the shadow's [services.<name>] table)`,
			},
		},
		{
			name: "health checks out of range",
			data: withMinimal(`[services.s.load_balancer.health_check]`, `path = "health"`, `interval = "1s"`, `timeout = "2s"`, `kind = "tgi"`, `[services.s.load_balancer.passive_health]`, `consecutive_failures = 0`, `error_rate = 2.0`),
			want: []string{
				`t.toml:8:8: services.s.load_balancer.health_check.path "health": want an absolute path such as "/health"`,
				`t.toml:10:11: services.s.load_balancer.health_check.timeout 2s: want more than 0 and less than interval (1s)`,
				`t.toml:11:8: services.s.load_balancer.health_check.kind "tgi": want one of "http", "vllm", "sglang", "llama.cpp", "ollama"`,
				`t.toml:13:24: services.s.load_balancer.passive_health.consecutive_failures 0: want 1..1000`,
				`t.toml:14:14: services.s.load_balancer.passive_health.error_rate 2: want 0 (off) to 1`,
			},
		},
		{
			name: "type errors say what was expected",
			data: withMinimal(`[entrypoints.api]`, `address = 8081`, `multicore = "yes"`, `max_connections = 1.5`),
			want: []string{
				`t.toml:8:11: entrypoints.api.address must be a string, not an integer (a TOML string is quoted: "8081")`,
				`t.toml:9:13: entrypoints.api.multicore must be a boolean such as true, not a string`,
				`t.toml:10:19: entrypoints.api.max_connections must be an integer of 0 or more, not a float`,
			},
		},
		{
			name: "type errors point at the value of every kind",
			data: withMinimal(
				`[entrypoints.api]`,
				`address = ["127.0.0.1:8081"]`,
				`send_buffer_bytes = true`,
				`max_connections =  1979-05-27`,
				`multicore = [true]`,
				`trusted_ips = [ "10.0.0.0/8", false, [ "x" ], { a = 1 } ]`,
				`tls = { cert_file = false, key_file = "k.pem", min_version = 1.2 }`,
				`[services.t.load_balancer]`,
				`servers = [ { url = "http://127.0.0.1:8001" }, { url = "http://127.0.0.1:8002", weight = 07:32:00 } ]`,
			),
			want: []string{
				`t.toml:8:11: entrypoints.api.address must be a string, not an array`,
				`t.toml:9:21: entrypoints.api.send_buffer_bytes must be an integer from 0 to 2147483647, not a boolean`,
				`t.toml:10:20: entrypoints.api.max_connections must be an integer of 0 or more, not a date/time`,
				`t.toml:11:13: entrypoints.api.multicore must be a boolean (true or false), not an array`,
				`t.toml:12:31: entrypoints.api.trusted_ips[1] must be a string, not a boolean (a TOML string is quoted: "false")`,
				`t.toml:12:38: entrypoints.api.trusted_ips[2] must be a string, not an array`,
				`t.toml:12:47: entrypoints.api.trusted_ips[3] must be a string, not a table`,
				`t.toml:13:21: entrypoints.api.tls.cert_file must be a string, not a boolean (a TOML string is quoted: "false")`,
				`t.toml:13:62: entrypoints.api.tls.min_version must be a string, not a float (a TOML string is quoted: "1.2")`,
				`t.toml:15:90: services.t.load_balancer.servers[1].weight must be an integer from 1 to 1000000, not a date/time`,
			},
		},
		{
			name: "an integer key given another type says its range and suggests only what is in it",
			data: withMinimal(
				`[entrypoints.api]`,
				`address = "127.0.0.1:8081"`,
				`max_header_bytes = 1e12`,
				`send_buffer_bytes = 65536.0`,
				`event_loops = "2000"`,
				`max_body_bytes = 1e12`,
				`max_connections = "100"`,
				`[services.s.load_balancer.health_check]`,
				`expected_status = 200.5`,
				`[middlewares.cb]`,
				`type = "circuit-breaker"`,
				`failure_threshold = 1e6`,
				`success_threshold = "2"`,
			),
			want: []string{
				`t.toml:9:20: entrypoints.api.max_header_bytes must be an integer from 1024 to 1048576, not a float`,
				`t.toml:10:21: entrypoints.api.send_buffer_bytes must be an integer from 0 to 2147483647 such as 65536, not a float`,
				`t.toml:11:15: entrypoints.api.event_loops must be an integer from 0 to 1024, not a string`,
				`t.toml:12:18: entrypoints.api.max_body_bytes must be an integer of 1 or more such as 1000000000000, not a float`,
				`t.toml:13:19: entrypoints.api.max_connections must be an integer of 0 or more such as 100, not a string`,
				`t.toml:15:19: services.s.load_balancer.health_check.expected_status must be an integer from 100 to 599, or 0, not a float`,
				`t.toml:18:21: middlewares.cb.failure_threshold must be an integer from 1 to 1000, not a float`,
				`t.toml:19:21: middlewares.cb.success_threshold must be an integer from 1 to 1000 such as 2, not a string`,
			},
		},
		{
			name: "a size written with a unit says its count of bytes, where the unit has one meaning",
			data: withMinimal(
				`[entrypoints.api]`,
				`address = "127.0.0.1:8081"`,
				`max_body_bytes = "16MiB"`,
				`max_header_bytes = "16 KiB"`,
				`send_buffer_bytes = "64k"`,
				`[services.s.mirror]`,
				`service = "t"`,
				`max_bytes = "2MB"`,
				`[services.t.load_balancer]`,
				`servers = [{ url = "http://127.0.0.1:8001" }]`,
				`[middlewares.bl]`,
				`type = "body-limit"`,
				`max_bytes = "1.5M"`,
				`[middlewares.gz]`,
				`type = "compress"`,
				`min_size = "1Ki"`,
				`[middlewares.gz2]`,
				`type = "compress"`,
				`min_size = "2TiB"`,
			),
			want: []string{
				`t.toml:9:18: entrypoints.api.max_body_bytes must be an integer of 1 or more such as 16777216, not a string`,
				`t.toml:10:20: entrypoints.api.max_header_bytes must be an integer from 1024 to 1048576 such as 16384, not a string`,
				`t.toml:11:21: entrypoints.api.send_buffer_bytes must be an integer from 0 to 2147483647 such as 65536, not a string`,
				`t.toml:14:13: services.s.mirror.max_bytes must be an integer from 65536 to 1099511627776, not a string`,
				`t.toml:19:13: middlewares.bl.max_bytes must be an integer from 0 to 1099511627776 such as 1572864, not a string`,
				`t.toml:22:12: middlewares.gz.min_size must be an integer from 0 to 1099511627776 such as 1024, not a string`,
				`t.toml:25:12: middlewares.gz2.min_size must be an integer from 0 to 1099511627776, not a string`,
			},
		},
		{
			name: "bad durations",
			data: withMinimal(`[entrypoints.api]`, `address = "127.0.0.1:8081"`, `idle_timeout = "10"`, `drain_timeout = "-5s"`, `read_header_timeout = 10`),
			want: []string{
				`t.toml:9:16: entrypoints.api.idle_timeout: invalid duration "10" (a duration needs a unit: write "10s")`,
				`t.toml:10:17: entrypoints.api.drain_timeout: invalid duration "-5s" (want a positive duration such as "500ms", "15s" or "5m")`,
				`t.toml:11:23: entrypoints.api.read_header_timeout must be a duration string such as "10s", not an integer`,
			},
		},
		{
			name: "misspelt values",
			data: withMinimal(`[entrypoints.api]`, `address = "127.0.0.1:8081"`, `engine = "gent"`, `[services.t.load_balancer]`, `servers = [{ url = "http://127.0.0.1:8001" }]`, `strategy = "round-robbin"`),
			want: []string{
				`t.toml:9:10: entrypoints.api.engine "gent": want one of "gnet", "fasthttp" (did you mean "gnet"?)`,
				`t.toml:12:12: services.t.load_balancer.strategy "round-robbin": want one of "round-robin", "weighted", "least-connections", "random" (did you mean "round-robin"?)`,
			},
		},
		{
			name: "values in another letter case or a longer form",
			data: withMinimal(`[entrypoints.api]`, `address = "127.0.0.1:8081"`, `engine = "GNET"`, `[services.t.load_balancer]`, `servers = [{ url = "http://127.0.0.1:8001" }]`, `strategy = "Least-Connections"`, `[log]`, `level = "warning"`, `format = "JSON"`),
			want: []string{
				`t.toml:9:10: entrypoints.api.engine "GNET": want one of "gnet", "fasthttp" (did you mean "gnet"?)`,
				`t.toml:12:12: services.t.load_balancer.strategy "Least-Connections": want one of "round-robin", "weighted", "least-connections", "random" (did you mean "least-connections"?)`,
				`t.toml:14:9: log.level "warning": want one of "debug", "info", "warn", "error" (did you mean "warn"?)`,
				`t.toml:15:10: log.format "JSON": want one of "text", "json" (did you mean "json"?)`,
			},
		},
		{
			name: "values with their words joined or split otherwise, or in another letter case",
			data: withMinimal(`[services.t.load_balancer]`, `servers = [{ url = "http://127.0.0.1:8001" }]`, `strategy = "RoundRobin"`,
				`[middlewares.rl]`, `type = "rate-limit"`, `rate = 5`, `key = "Client-IP"`,
				`[middlewares.gz]`, `type = "compress"`, `encodings = ["GZIP"]`),
			want: []string{
				`t.toml:9:12: services.t.load_balancer.strategy "RoundRobin": want one of "round-robin", "weighted", "least-connections", "random" (did you mean "round-robin"?)`,
				`t.toml:13:7: middlewares.rl.key "Client-IP": want "client_ip", "api_key", "jwt_subject" or "header:<Name>" (a header field name, e.g. "header:X-Tenant") (did you mean "client_ip"?)`,
				`t.toml:16:14: middlewares.gz.encodings[0] "GZIP": want "zstd", "br" or "gzip" (did you mean "gzip"?)`,
			},
		},
		{
			name: "unset environment variable",
			data: withMinimal(`[entrypoints.api]`, `address = "127.0.0.1:${SLUICE_TEST_UNSET_PORT}"`),
			want: []string{`t.toml:8:11: entrypoints.api.address: environment variable SLUICE_TEST_UNSET_PORT is not set (referenced as ${SLUICE_TEST_UNSET_PORT})`},
		},
		{
			name: "bad interpolation syntax",
			data: withMinimal(`[middlewares.m]`, `type = "jwt"`, `value = "${SLUICE_TEST_SET"`, `issuer = "${1X}"`),
			want: []string{
				`t.toml:9:9: middlewares.m.value: unterminated "${" in string (write "$${" for a literal "${")`,
				`t.toml:10:10: middlewares.m.issuer: invalid environment variable name "1X" in "${...}" (want [A-Za-z_][A-Za-z0-9_]*; write "$${" for a literal "${")`,
			},
		},
		{
			name: "gnet has no TLS",
			data: withMinimal(`[entrypoints.secure]`, `address = ":8443"`, `engine = "gnet"`, `tls = { cert_file = "c.pem", key_file = "k.pem" }`),
			want: []string{`t.toml:10:1: entrypoints.secure: engine "gnet" serves plaintext only and has no TLS; set engine = "fasthttp" to terminate TLS on this entrypoint`},
		},
		{
			name: "tls needs both files, engine must be known",
			data: withMinimal(`[entrypoints.secure]`, `address = ":8443"`, `engine = "nginx"`, `tls = { cert_file = "c.pem" }`),
			want: []string{
				`t.toml:9:10: entrypoints.secure.engine "nginx": want one of "gnet", "fasthttp"`,
				`t.toml:10:1: entrypoints.secure.tls.key_file is required (PEM private key)`,
			},
		},
		{
			name: "router cross references",
			data: withMinimal(
				`[routers.x]`,
				`rule = "Path(`+"`/x`"+`)"`,
				`service = "S"`,
				`entrypoints = ["web", "webb", "web"]`,
				`middlewares = ["auth", "nope"]`,
				`[middlewares.auth]`,
				`type = "jwt"`,
				`value = "${SLUICE_TEST_SECRET}"`,
			),
			want: []string{
				`t.toml:9:11: routers.x.service: no service named "S" (did you mean "s"?)`,
				`t.toml:10:23: routers.x.entrypoints: no entrypoint named "webb" (did you mean "web"?)`,
				`t.toml:10:31: routers.x.entrypoints: "web" is listed twice`,
				`t.toml:11:24: routers.x.middlewares: no middleware named "nope" (defined: "auth")`,
			},
		},
		{
			name: "rate-limit options",
			data: withMinimal(
				`[middlewares.a]`,
				`type = "rate-limit"`,
				`rat = 60`,
				`burst = 0`,
				`key = "cookie:session"`,
				`[middlewares.b]`,
				`type = "rate-limit"`,
				`rate = "60/m"`,
				`max_keys = 10`,
				`[middlewares.c]`,
				`type = "rate-limit"`,
				`rate = 0.0001`,
				`key = "header:X Tenant"`,
				`[middlewares.d]`,
				`type = "rate-limit"`,
				`rate = 60`,
				`ipv6_prefix_len = 0`,
				`ipv4_prefix_len = 33`,
				`[middlewares.e]`,
				`type = "rate-limit"`,
				`rate = 60`,
				`ipv6_prefix_len = 129`,
				`ipv4_prefix_len = "24"`,
			),
			want: []string{
				`t.toml:7:14: middlewares.a.rate is required (requests per minute, e.g. rate = 60)`,
				`t.toml:9:1: middlewares.a: unknown key "rat" for a rate-limit middleware (did you mean "rate"? known keys: burst, ipv4_prefix_len, ipv6_prefix_len, key, max_keys, rate)`,
				`t.toml:10:9: middlewares.a.burst 0: want 1..1000000`,
				`t.toml:11:7: middlewares.a.key "cookie:session": want "client_ip", "api_key", "jwt_subject" or "header:<Name>" (a header field name, e.g. "header:X-Tenant")`,
				`t.toml:14:8: middlewares.b.rate must be a number, not a string`,
				`t.toml:15:12: middlewares.b.max_keys 10: want 64..16777216`,
				`t.toml:18:8: middlewares.c.rate 0.0001: want 0.01..1e+08`,
				`t.toml:19:7: middlewares.c.key "header:X Tenant": want "client_ip", "api_key", "jwt_subject" or "header:<Name>" (a header field name, e.g. "header:X-Tenant")`,
				`t.toml:23:19: middlewares.d.ipv6_prefix_len 0: want 1..128`,
				`t.toml:24:19: middlewares.d.ipv4_prefix_len 33: want 1..32`,
				`t.toml:28:19: middlewares.e.ipv6_prefix_len 129: want 1..128`,
				`t.toml:29:19: middlewares.e.ipv4_prefix_len must be an integer from 1 to 32 such as 24, not a string`,
			},
		},
		{
			name: "rate-limit by consumer needs authentication first",
			data: withMinimal(
				`middlewares = ["per-key", "keys"]`,
				`[middlewares.per-key]`,
				`type = "rate-limit"`,
				`rate = 60`,
				`key = "api_key"`,
				`[middlewares.keys]`,
				`type = "api-key"`,
			),
			want: []string{
				`t.toml:7:16: routers.r.middlewares: "per-key" counts requests by consumer (key = "api_key"): list an api-key or jwt middleware before it`,
			},
		},
		{
			name: "circuit-breaker options",
			data: withMinimal(
				`[middlewares.cb]`,
				`type = "circuit-breaker"`,
				`failure_threshold = 0`,
				`cooldown_secs = "30s"`,
				`success_threshold = 1.5`,
				`cooldown = 30`,
				`[middlewares.cb2]`,
				`type = "circuit-breaker"`,
				`cooldown_secs = 0.01`,
			),
			want: []string{
				`t.toml:9:21: middlewares.cb.failure_threshold 0: want 1..1000`,
				`t.toml:10:17: middlewares.cb.cooldown_secs must be a number, not a string`,
				`t.toml:11:21: middlewares.cb.success_threshold must be an integer from 1 to 1000, not a float`,
				`t.toml:12:1: middlewares.cb: unknown key "cooldown" for a circuit-breaker middleware (known keys: cooldown_secs, failure_threshold, success_threshold)`,
				`t.toml:15:17: middlewares.cb2.cooldown_secs 0.01: want 0.1..86400`,
			},
		},
		{
			name: "jwt options",
			data: withMinimal(
				`[middlewares.a]`,
				`type = "jwt"`,
				`issuer = ""`,
				`[middlewares.b]`,
				`type = "jwt"`,
				`value = "${SLUICE_TEST_SET}"`,
				`leeway = "1h"`,
				`audience = ["x", 3]`,
				`[middlewares.c]`,
				`type = "jwt"`,
				`value = "${SLUICE_TEST_SECRET}"`,
				`public_key_file = "/etc/sluice/jwt.pem"`,
				`claims = "sub"`,
			),
			want: []string{
				`t.toml:7:14: middlewares.a: a jwt middleware needs value = "${JWT_SECRET}" (the HMAC secret of HS256 tokens), public_key_file = "<PEM file>" (RS256, ES256), jwks_file or jwks_url (a JWK Set)`,
				`t.toml:9:10: middlewares.a.issuer is empty: write a value, or remove the key`,
				`t.toml:12:9: middlewares.b.value: the HMAC secret is too short (1 bytes); want at least 32 bytes (RFC 7518 §3.2), e.g. from openssl rand -base64 48`,
				`t.toml:13:10: middlewares.b.leeway: invalid duration "1h" (want 0s to 10m0s, such as "30s")`,
				`t.toml:14:18: middlewares.b.audience[1] must be a string, not an integer`,
				`t.toml:18:1: middlewares.c: value, public_key_file are exclusive (an HMAC secret, a public key, or a JWK Set)`,
				`t.toml:19:1: middlewares.c: unknown key "claims" for a jwt middleware (did you mean "claim"? known keys: audience, claim, forward_claims, issuer, jwks_file, jwks_refresh, jwks_url, leeway, public_key_file, value)`,
			},
		},
		{
			name: "empty middleware lists say what to write instead",
			data: withMinimal(
				`[middlewares.c]`, `type = "cors"`, `allow_origins = []`, `allow_methods = []`, `expose_headers = []`,
				`[middlewares.h]`, `type = "headers"`, `request_remove = []`,
				`[middlewares.z]`, `type = "compress"`, `content_types = []`,
				`[middlewares.r]`, `type = "retry"`, `statuses = []`,
				`[middlewares.s]`, `type = "retry"`, `statuses = 502`,
			),
			want: []string{
				`t.toml:9:17: middlewares.c.allow_origins is empty: list at least one origin such as "https://app.example.com", or "*" for any`,
				`t.toml:10:17: middlewares.c.allow_methods is empty: list at least one method such as "POST", or remove the key for the default ["GET", "HEAD", "POST"]`,
				`t.toml:14:18: middlewares.h.request_remove is empty: list at least one field name such as "Server", or remove the key`,
				`t.toml:17:17: middlewares.z.content_types is empty: list at least one media type such as "application/json" or "text/*", or remove the key for the default ["text/*", "application/json", "application/x-ndjson", "application/javascript", "application/xml", "application/problem+json", "image/svg+xml"]`,
				`t.toml:20:12: middlewares.r.statuses is empty: list at least one 5xx status such as 503, or remove the key for the default [502, 503, 504]`,
				`t.toml:23:12: middlewares.s.statuses must be an array of 5xx statuses such as [502, 503], not an integer`,
			},
		},
		{
			name: "an empty middleware string says what to write instead",
			data: withMinimal(`[middlewares.l]`, `type = "rate-limit"`, `rate = 60`, `key = ""`),
			want: []string{
				`t.toml:10:7: middlewares.l.key is empty: write a value, or remove the key for the default "client_ip"`,
			},
		},
		{
			name: "router required keys, empty entrypoints, negative priority",
			data: withMinimal(`[routers.y]`, `entrypoints = []`, `priority = -1`),
			want: []string{
				`t.toml:7:10: routers.y.rule is required, e.g. rule = "PathPrefix(` + "`/v1`" + `)"`,
				`t.toml:7:10: routers.y.service is required (the name of a [services.<name>] table), or models = true for a model router`,
				`t.toml:8:15: routers.y.entrypoints is empty: list at least one entrypoint, or remove the key to serve on all`,
				`t.toml:9:12: routers.y.priority -1: want 0 (order by rule length) or more`,
			},
		},
		{
			name: "clashing addresses",
			data: withMinimal(`[entrypoints.all]`, `address = "0.0.0.0:8080"`, `[admin]`, `address = "127.0.0.1:8080"`),
			want: []string{
				`t.toml:3:11: entrypoints.web.address "127.0.0.1:8080" clashes with entrypoints.all (t.toml:8:11)`,
				`t.toml:10:11: admin.address "127.0.0.1:8080" clashes with entrypoints.all (t.toml:8:11)`,
				`t.toml:10:11: admin.address "127.0.0.1:8080" clashes with entrypoints.web (t.toml:3:11)`,
			},
		},
		{
			name: "many clashing addresses: three named, the rest counted",
			data: withMinimal(`[entrypoints.a]`, `address = ":9191"`, `[entrypoints.b]`, `address = "127.0.0.1:9191"`,
				`[entrypoints.c]`, `address = "[::1]:9191"`, `[entrypoints.d]`, `address = "127.0.0.2:9191"`,
				`[entrypoints.e]`, `address = ":9191"`),
			want: []string{
				`t.toml:10:11: entrypoints.b.address "127.0.0.1:9191" clashes with entrypoints.a (t.toml:8:11)`,
				`t.toml:12:11: entrypoints.c.address "[::1]:9191" clashes with entrypoints.a (t.toml:8:11)`,
				`t.toml:14:11: entrypoints.d.address "127.0.0.2:9191" clashes with entrypoints.a (t.toml:8:11)`,
				`t.toml:16:11: entrypoints.e.address ":9191" clashes with entrypoints.a (t.toml:8:11)`,
				`t.toml:16:11: entrypoints.e.address ":9191" clashes with entrypoints.b (t.toml:10:11)`,
				`t.toml:16:11: entrypoints.e.address ":9191" clashes with entrypoints.c (t.toml:12:11)`,
				`t.toml:16:11: entrypoints.e.address ":9191" clashes with 1 more entrypoints`,
			},
		},
		{
			name: "keys nested too deep",
			data: withMinimal(`[middlewares.m]`, `type = "headers"`, `options.`+strings.Repeat("a.", MaxKeyDepth)+`b = 1`),
			want: []string{`t.toml:9:67: key nested deeper than 32 levels (table names, dotted key parts, arrays and inline tables together)`},
		},
		{
			name: "bad addresses",
			data: withMinimal(`[entrypoints.a]`, `address = "localhost"`, `[entrypoints.b]`, `address = "x:http"`),
			want: []string{
				`t.toml:8:11: entrypoints.a.address "localhost": want host:port, e.g. "127.0.0.1:8080" or ":8080"`,
				`t.toml:10:11: entrypoints.b.address "x:http": port "http" is not a number in 0..65535`,
			},
		},
		{
			name: "servers: urls and weights",
			data: withMinimal(
				`[services.t.load_balancer]`,
				`strategy = "fastest"`,
				`servers = [`,
				`  { url = "ftp://h:21" },`,
				`  { url = "http://h:8000/v1", weight = 0 },`,
				`  { weight = 2 },`,
				`  "http://h:1",`,
				`]`,
			),
			want: []string{
				`t.toml:8:12: services.t.load_balancer.strategy "fastest": want one of "round-robin", "weighted", "least-connections", "random"`,
				`t.toml:10:11: services.t.load_balancer.servers[0].url "ftp://h:21": URL scheme must be http or https, e.g. "http://127.0.0.1:8000"`,
				`t.toml:11:11: services.t.load_balancer.servers[1].url "http://h:8000/v1": URL must be scheme://host[:port] only (no path, query or fragment)`,
				`t.toml:11:40: services.t.load_balancer.servers[1].weight 0: want 1..1000000`,
				`t.toml:12:3: services.t.load_balancer.servers[2].url is required`,
				`t.toml:13:3: services.t.load_balancer.servers[3] must be a table such as { url = "http://h:1" }, not a string`,
			},
		},
		{
			name: "servers: a URL without its scheme, or with spaces, says what to write",
			data: withMinimal(
				`[services.t.load_balancer]`,
				`servers = [`,
				`  { url = "127.0.0.1:8000" },`,
				`  { url = "[::1]:8000" },`,
				`  { url = "localhost:8000" },`,
				`  { url = "10.0.0.1" },`,
				`  { url = " http://h:8000" },`,
				`  { url = "${SLUICE_TEST_HOSTPORT}" },`,
				`  { url = "mailto:x" },`,
				`  { url = "127.0.0.1:8000/v1" },`,
				`]`,
			),
			want: []string{
				`t.toml:9:11: services.t.load_balancer.servers[0].url "127.0.0.1:8000": URL has no scheme: write "http://127.0.0.1:8000"`,
				`t.toml:10:11: services.t.load_balancer.servers[1].url "[::1]:8000": URL has no scheme: write "http://[::1]:8000"`,
				`t.toml:11:11: services.t.load_balancer.servers[2].url "localhost:8000": URL has no scheme: write "http://localhost:8000"`,
				`t.toml:12:11: services.t.load_balancer.servers[3].url "10.0.0.1": URL has no scheme: write "http://10.0.0.1"`,
				`t.toml:13:11: services.t.load_balancer.servers[4].url " http://h:8000": URL has white space before or after it: write "http://h:8000"`,
				`t.toml:14:11: services.t.load_balancer.servers[5].url "${SLUICE_TEST_HOSTPORT}": URL has no scheme: write "http://${SLUICE_TEST_HOSTPORT}"`,
				`t.toml:15:11: services.t.load_balancer.servers[6].url "mailto:x": URL scheme must be http or https, e.g. "http://127.0.0.1:8000"`,
				`t.toml:16:11: services.t.load_balancer.servers[7].url "127.0.0.1:8000/v1": URL has no scheme: write http:// or https:// before the host, e.g. "http://127.0.0.1:8000"`,
			},
		},
		{
			name: "scaling.kube.api_server: a URL without its scheme, or not one, says what to write",
			data: withMinimal(
				`[services.k.scaling]`,
				`executor = "kube"`,
				`[services.k.scaling.kube]`,
				`deployment = "d"`,
				`service = "s"`,
				`url = "http://10.0.0.1:8000"`,
				`api_server = "${SLUICE_TEST_HOSTPORT}"`,
				`[services.l.scaling]`,
				`executor = "kube"`,
				`[services.l.scaling.kube]`,
				`deployment = "d"`,
				`service = "s"`,
				`url = "http://10.0.0.1:8000"`,
				`api_server = "ftp://k8s.example:443"`,
				`[services.m.scaling]`,
				`executor = "kube"`,
				`[services.m.scaling.kube]`,
				`deployment = "d"`,
				`service = "s"`,
				`url = "http://10.0.0.1:8000"`,
				`api_server = "https://k8s.example/k8s/clusters/c-1?x=1"`,
			),
			want: []string{
				`t.toml:13:14: services.k.scaling.kube.api_server "${SLUICE_TEST_HOSTPORT}": URL has no scheme: write "https://${SLUICE_TEST_HOSTPORT}"`,
				`t.toml:20:14: services.l.scaling.kube.api_server "ftp://k8s.example:443": URL scheme must be https or http, e.g. "https://10.96.0.1:443"`,
				`t.toml:27:14: services.m.scaling.kube.api_server "https://k8s.example/k8s/clusters/c-1?x=1": URL must be scheme://host[:port][/path] only (no query or fragment)`,
			},
		},
		{
			name: "array of tables positions",
			data: withMinimal(
				`[[services.u.load_balancer.servers]]`,
				`url = "http://h:1"`,
				`[[services.u.load_balancer.servers]]`,
				`url = "http://h:1/x"`,
			),
			want: []string{`t.toml:10:7: services.u.load_balancer.servers[1].url "http://h:1/x": URL must be scheme://host[:port] only (no path, query or fragment)`},
		},
		{
			name: "service without load balancer or servers",
			data: withMinimal(`[services.v]`, `[services.w.load_balancer]`, `servers = []`),
			want: []string{
				`t.toml:7:11: services.v has no load_balancer: add [services.v.load_balancer] with servers = [{ url = "http://host:port" }]`,
				`t.toml:9:1: services.w.load_balancer.servers: list at least one server, e.g. servers = [{ url = "http://127.0.0.1:8000" }]`,
			},
		},
		{
			name: "middleware type required and known",
			data: withMinimal(`[middlewares.a]`, `rate = 60`, `[middlewares.b]`, `type = "oauth"`),
			want: []string{
				`t.toml:7:14: middlewares.a.type is required (one of "api-key", "body-limit", "circuit-breaker", "compress", "cors", "headers", "ip-allow", "jwt", "rate-limit", "retry", "strip-prefix")`,
				`t.toml:10:8: middlewares.b.type "oauth": unknown middleware type (want one of "api-key", "body-limit", "circuit-breaker", "compress", "cors", "headers", "ip-allow", "jwt", "rate-limit", "retry", "strip-prefix")`,
			},
		},
		{
			name: "admin allowed_hosts entries",
			data: withMinimal(`[admin]`, `allowed_hosts = ["admin.example", "", "admin.example:9090", "https://admin.example", "*.example", "[10.0.0.1]", "[::1]", "::1", "10.0.0.1"]`),
			want: []string{
				`t.toml:8:35: admin.allowed_hosts[1] "": empty host name`,
				`t.toml:8:39: admin.allowed_hosts[2] "admin.example:9090": write the host without a port (the port is not compared)`,
				`t.toml:8:61: admin.allowed_hosts[3] "https://admin.example": not a host name or IP address (write the bare host: no scheme, path or wildcard)`,
				`t.toml:8:86: admin.allowed_hosts[4] "*.example": not a host name or IP address (write the bare host: no scheme, path or wildcard)`,
				`t.toml:8:99: admin.allowed_hosts[5] "[10.0.0.1]": not an IPv6 address`,
			},
		},
		{
			name: "admin token env unset",
			data: withMinimal(`[admin]`, `token_env = "SLUICE_TEST_UNSET_TOKEN"`),
			want: []string{`t.toml:8:13: admin.token_env: environment variable SLUICE_TEST_UNSET_TOKEN is not set or empty (it must hold the admin bearer token)`},
		},
		{
			name: "log values",
			data: withMinimal(`[log]`, `level = "verbose"`, `format = "xml"`),
			want: []string{
				`t.toml:8:9: log.level "verbose": want one of "debug", "info", "warn", "error"`,
				`t.toml:9:10: log.format "xml": want one of "text", "json"`,
			},
		},
		{
			name: "no entrypoints",
			data: doc(`[log]`, `level = "info"`),
			want: []string{`t.toml:1:1: no entrypoints: define at least one [entrypoints.<name>] with an address`},
		},
		{
			name: "a collection that is not a table",
			data: doc(`entrypoints = 5`),
			want: []string{
				`t.toml:1:1: no entrypoints: define at least one [entrypoints.<name>] with an address`,
				`t.toml:1:15: entrypoints must be a table of named tables ([entrypoints.<name>]), not an integer`,
			},
		},
		{
			name: "an entry that is not a table",
			data: withMinimal(`[routers]`, `z = "x"`),
			want: []string{`t.toml:8:1: routers.z must be a table ([routers.z]), not a string`},
		},
		{
			name: "bad names",
			data: withMinimal(`[entrypoints."my api"]`, `address = ":9"`),
			want: []string{`t.toml:7:14: entrypoint name "my api": names are 1..128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit`},
		},
		{
			name: "trusted_ips entries that are not addresses or networks",
			data: withMinimal(`[entrypoints.api]`, `address = ":9"`, `trusted_ips = ["10.0.0.0/8", "10.0.0.0/33", "lb.internal", "::ffff:10.0.0.0/129", "", "fe80::1%eth0", "10.0.0.0/+8", "10.0.0.0/"]`),
			want: []string{
				`t.toml:9:30: entrypoints.api.trusted_ips[1] "10.0.0.0/33": prefix length "33": want 0..32 for an IPv4 network`,
				`t.toml:9:45: entrypoints.api.trusted_ips[2] "lb.internal": not an IP address: want an IP address or a network in CIDR notation, e.g. "192.0.2.7", "10.0.0.0/8" or "fd00::/8"`,
				`t.toml:9:60: entrypoints.api.trusted_ips[3] "::ffff:10.0.0.0/129": prefix length "129": want 0..128 for an IPv6 network`,
				`t.toml:9:83: entrypoints.api.trusted_ips[4] "": empty: want an IP address or a network in CIDR notation, e.g. "192.0.2.7", "10.0.0.0/8" or "fd00::/8"`,
				`t.toml:9:87: entrypoints.api.trusted_ips[5] "fe80::1%eth0": a zone (%eth0) is never part of a peer's address: write the address without it`,
				`t.toml:9:103: entrypoints.api.trusted_ips[6] "10.0.0.0/+8": prefix length "+8": want 0..32 for an IPv4 network`,
				`t.toml:9:118: entrypoints.api.trusted_ips[7] "10.0.0.0/": prefix length "": want 0..32 for an IPv4 network`,
			},
		},
		{
			name: "trusted_ips must be an array of strings",
			data: withMinimal(`[entrypoints.api]`, `address = ":9"`, `trusted_ips = "10.0.0.0/8"`, `[entrypoints.b]`, `address = ":10"`, `trusted_ips = [10]`),
			want: []string{
				`t.toml:9:15: entrypoints.api.trusted_ips must be an array such as ["10.0.0.0/8"], not a string`,
				`t.toml:12:16: entrypoints.b.trusted_ips[0] must be a string, not an integer (a TOML string is quoted: "10")`,
			},
		},
		{
			name: "upstream_io unknown, and loop on fasthttp",
			data: withMinimal(`[entrypoints.api]`, `address = ":9"`, `upstream_io = "epoll"`, `[entrypoints.b]`, `address = ":10"`, `engine = "fasthttp"`, `upstream_io = "loop"`),
			want: []string{
				`t.toml:9:15: entrypoints.api.upstream_io "epoll": want one of "worker", "loop"`,
				`t.toml:13:15: entrypoints.b.upstream_io "loop" needs engine "gnet" (event loops); engine "fasthttp" does its upstream I/O on its own goroutines`,
			},
		},
		{
			name: "upstream_connect unknown, and loop without the loop path",
			data: withMinimal(`[entrypoints.api]`, `address = ":9"`, `upstream_connect = "epoll"`, `[entrypoints.b]`, `address = ":10"`, `upstream_io = "worker"`, `upstream_connect = "loop"`),
			want: []string{
				`t.toml:9:20: entrypoints.api.upstream_connect "epoll": want one of "worker", "loop"`,
				`t.toml:13:20: entrypoints.b.upstream_connect "loop" needs upstream_io "loop" (engine "gnet"): the event loops connect only for the exchanges they drive`,
			},
		},
		{
			name: "sizes out of range",
			data: withMinimal(`[entrypoints.api]`, `address = ":9"`, `max_header_bytes = 100`, `max_body_bytes = 0`, `max_connections = -1`),
			want: []string{
				`t.toml:9:20: entrypoints.api.max_header_bytes 100: want 1024..1048576 bytes`,
				`t.toml:10:18: entrypoints.api.max_body_bytes 0: want at least 1 byte`,
				`t.toml:11:19: entrypoints.api.max_connections -1: want 0 (unlimited) or more`,
			},
		},
		{
			name: "send_buffer_bytes negative or past what setsockopt takes",
			data: withMinimal(`[entrypoints.api]`, `address = ":9"`, `send_buffer_bytes = -1`, `[entrypoints.b]`, `address = ":10"`, `send_buffer_bytes = 4294967297`),
			want: []string{
				`t.toml:9:21: entrypoints.api.send_buffer_bytes -1: want 0 (the kernel's default) to 2147483647 bytes`,
				`t.toml:12:21: entrypoints.b.send_buffer_bytes 4294967297: want 0 (the kernel's default) to 2147483647 bytes`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadBytes("t.toml", tc.data)
			if err == nil {
				t.Fatalf("LoadBytes succeeded: %+v", c)
			}
			if c != nil {
				t.Errorf("LoadBytes returned a config with an error")
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, not ErrorList: %v", err, err)
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors:\n got: %s\nwant: %s", strings.Join(got, "\n      "), strings.Join(tc.want, "\n      "))
			}
			for _, e := range list {
				if e.Pos.Line < 1 || e.Pos.Col < 1 || e.Pos.File != "t.toml" {
					t.Errorf("error without a position: %#v", e)
				}
			}
		})
	}
}

func TestMinimalIsValid(t *testing.T) {
	if _, err := LoadBytes("t.toml", withMinimal()); err != nil {
		t.Fatal(err)
	}
}

// TestLoadWorkIsLinear: documents that made loading do work in the square of their size
// (every pair of entrypoints on one port compared and reported, every earlier error searched
// for each bad trusted_ips element, every prefix of a deep key indexed) load in steps in
// proportion to their size.
func TestLoadWorkIsLinear(t *testing.T) {
	var samePort, trusted strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&samePort, "[entrypoints.e%d]\naddress = \":8080\"\n", i)
	}
	trusted.WriteString("[entrypoints.w]\naddress = \":1\"\ntrusted_ips = [" + strings.Repeat("1,", 3000) + "1]\n")
	deepKey := "x = 1\n" + strings.Repeat("a.", 3000) + "a = 1\n"
	deepArray := "x = " + strings.Repeat("[", 3000) + strings.Repeat("]", 3000) + "\n"
	for name, d := range map[string]string{"same port": samePort.String(), "trusted_ips": trusted.String(),
		"deep key": deepKey, "deep array": deepArray} {
		var err error
		work := steps.Count(func() { _, err = LoadBytes("t.toml", []byte(d)) })
		require.Error(t, err, name)
		require.Less(t, work, int64(64*len(d)), "%s: steps for %d bytes", name, len(d))
	}
}
