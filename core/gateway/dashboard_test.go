package gateway_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dashboardPanel is what the test reads of a Grafana panel.
type dashboardPanel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a row's panels, when collapsed
}

type dashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	SchemaVersion int              `json:"schemaVersion"`
	Panels        []dashboardPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

var (
	// Parts of a PromQL expression that name no metric: strings, label matchers, ranges and
	// offsets, grouping clauses, numbers and durations, Grafana variables.
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlVars     = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlNumbers  = regexp.MustCompile(`(^|[^A-Za-z0-9_:])(?:0x[0-9a-fA-F]+|[0-9][0-9A-Za-z_.]*)`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*\s*\(?`)
	promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
	labelValues    = regexp.MustCompile(`^label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)`)
)

// promqlMetrics returns the metric names expr selects: identifiers that are neither functions
// nor aggregations (followed by a parenthesis), keywords, label names or numbers.
func promqlMetrics(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, " ")
	s = promqlVars.ReplaceAllString(s, " ")
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRanges.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	s = promqlNumbers.ReplaceAllString(s, "${1} ")
	var names []string
	for _, tok := range promqlIdent.FindAllString(s, -1) {
		if strings.HasSuffix(tok, "(") {
			continue
		}
		if tok = strings.TrimSpace(tok); !slices.Contains(promqlKeywords, strings.ToLower(tok)) {
			names = append(names, tok)
		}
	}
	return names
}

func TestDashboardPromQLMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.95, sum by (router, le) (rate(sluice_ttft_seconds_bucket{router=~"$router"}[$__rate_interval])))`: {"sluice_ttft_seconds_bucket"},
		`sum(rate(a_total{code="5xx"}[5m] offset 1h)) / sum without (x) (rate(b_total[5m]))`:                                    {"a_total", "b_total"},
		`max by (instance) (sluice_config_last_reload_success_timestamp_seconds) * 1e3 > bool 0`:                                {"sluice_config_last_reload_success_timestamp_seconds"},
		`sum(x) by (le) or on (a) vector(0)`: {"x"},
	} {
		require.Equal(t, want, promqlMetrics(expr), expr)
	}
}

// Every query of deploy/grafana/sluice.json reads series that a running gateway exposes
// (for histograms, their _bucket, _sum or _count series).
func TestDashboardQueriesUseExposedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/sluice.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	require.GreaterOrEqual(t, d.SchemaVersion, 36)
	require.Len(t, d.Inputs, 1)
	require.Equal(t, "DS_PROMETHEUS", d.Inputs[0].Name)
	require.Equal(t, "prometheus", d.Inputs[0].PluginID)

	up := metricsUpstream(t)
	m := startMetricsGateway(t, "gnet", "web", "dashboard", up.addr(), "")
	serveTraffic(t, m, "web", "dashboard", up.addr())
	// A request routed by prefix affinity, so that its series exist (the registry is the
	// process's).
	f := prefixFleet(t, 1)
	base, _, _ := startPrefixGateway(t, "gnet", f)
	_ = prefixCall(t, base, "k-prod-1", newConversation("sticky", "dashboard").turn(1))
	exposed := map[string]bool{}
	for _, line := range strings.Split(m.scrape(t), "\n") {
		if line != "" && line[0] != '#' {
			exposed[line[:strings.IndexAny(line, "{ ")]] = true
		}
	}

	var panels []dashboardPanel
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			panels = append(panels, p)
		}
	}
	walk(d.Panels)
	require.NotEmpty(t, panels)
	used := map[string]bool{}
	for _, p := range panels {
		require.NotNil(t, p.Datasource, "panel %q", p.Title)
		require.Equal(t, "${DS_PROMETHEUS}", p.Datasource.UID, "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q", p.Title)
		for _, tg := range p.Targets {
			names := promqlMetrics(tg.Expr)
			require.NotEmpty(t, names, "panel %q: %s", p.Title, tg.Expr)
			for _, n := range names {
				require.True(t, exposed[n], "panel %q queries %s, which the gateway does not expose: %s", p.Title, n, tg.Expr)
				used[strings.TrimSuffix(n, "_bucket")] = true
			}
		}
	}
	for _, v := range d.Templating.List {
		sm := labelValues.FindStringSubmatch(v.Definition)
		require.NotNil(t, sm, "variable %s: %s", v.Name, v.Definition)
		require.True(t, exposed[sm[1]], "variable %s reads %s, which the gateway does not expose", v.Name, sm[1])
	}
	// The panels the dashboard promises.
	for _, n := range []string{
		"sluice_responses_total", "sluice_upstream_errors_total", "sluice_gateway_errors_total",
		"sluice_client_canceled_total", "sluice_ttft_seconds", "sluice_inter_token_latency_seconds",
		"sluice_request_duration_seconds", "sluice_open_connections", "sluice_active_requests",
		"sluice_active_streams", "sluice_backend_up", "sluice_config_reloads_total",
		"sluice_prefix_affinity_selections_total", "sluice_prefix_affinity_index_entries",
		"sluice_prefix_affinity_evictions_total", "sluice_prefix_affinity_invalidations_total",
	} {
		require.True(t, used[n], "no panel shows %s", n)
	}
}
