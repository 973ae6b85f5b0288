package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A reload that changes nothing keeps the mirror with its queue: the copies that waited for
// the shadow when it happened all reach it, none is dropped, and the mirror goes on copying
// after it. A reload that is refused changes nothing either.
func TestMirrorReloadKeepsQueuedCopies(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			sh := startGatedShadow(t)
			svc, shadow := "kept-"+engine, "kept-shadow-"+engine
			conf := gatedMirrorConfig(engine, sim, sh.addr(), svc, shadow, "")
			path := filepath.Join(t.TempDir(), "sluice.toml")
			g, addr, admin := startFileGateway(t, path, conf)
			// The metrics are the process's: a run of the test with -count counts from where the
			// last one left them.
			stopped := mirrorSeries("sluice_mirror_dropped_total", svc, shadow, `,reason="stopped"`)
			answered := mirrorSeries("sluice_mirror_responses_total", svc, shadow, `,code="2xx"`)
			stopped0, answered0 := metricValue(t, admin, stopped), metricValue(t, admin, answered)

			const n = 8
			sent := queueCopies(t, addr, admin, sh, svc, shadow, n)

			// Refused when it compiles, after the mirror's service was compiled.
			refused := conf + fmt.Sprintf("[log]\naccess_log = %q\n", filepath.Join(t.TempDir(), "missing", "access.log"))
			require.NoError(t, os.WriteFile(path, []byte(refused), 0o644))
			require.Error(t, g.Reload(), "an access log that cannot be opened refuses the configuration")
			require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
			require.NoError(t, g.Reload(), "the same configuration again")
			require.NoError(t, g.Reload(), "and again")

			sent = append(sent, sendChats(t, g.Addr("web"), n, n+2)...)
			sh.open()
			got := append([]string{sent[0]}, sh.wait(t, n+1)...)
			require.ElementsMatch(t, sent, got, "every copy reaches the shadow, those queued at the reloads included")
			waitMetric(t, admin+"/metrics", answered, func(v float64) bool { return v == answered0+n+2 })
			require.Equal(t, stopped0, metricValue(t, admin, stopped), "no copy dropped by the reloads")
		})
	}
}

// A reload that keeps the mirror but moves its shadow service to another server sends the
// copies still queued, and those that follow, to that server: a copy goes to the shadow
// service of the configuration in force when it is sent.
func TestMirrorReloadSendsQueuedCopiesToTheNewShadowServer(t *testing.T) {
	sim := startSimulator(t)
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			before, after := startGatedShadow(t), startGatedShadow(t)
			after.open()
			svc, shadow := "moved-"+engine, "moved-shadow-"+engine
			path := filepath.Join(t.TempDir(), "sluice.toml")
			g, addr, admin := startFileGateway(t, path, gatedMirrorConfig(engine, sim, before.addr(), svc, shadow, ""))
			stopped := mirrorSeries("sluice_mirror_dropped_total", svc, shadow, `,reason="stopped"`)
			stopped0 := metricValue(t, admin, stopped)

			const n = 6
			sent := queueCopies(t, addr, admin, before, svc, shadow, n)
			require.NoError(t, os.WriteFile(path, []byte(gatedMirrorConfig(engine, sim, after.addr(), svc, shadow, "")), 0o644))
			require.NoError(t, g.Reload())
			sent = append(sent, sendChats(t, g.Addr("web"), n, n+2)...)

			// The one sender is still held by the old server, with the copy it sent there before
			// the reload; once that is answered, the sender takes the next.
			before.open()
			require.ElementsMatch(t, sent[1:], after.wait(t, n+1), "the queued copies and the new ones go to the new server")
			require.Empty(t, before.got, "the old server gets nothing after the reload")
			require.Equal(t, stopped0, metricValue(t, admin, stopped), "no copy dropped by the reload")
		})
	}
}

// A reload that changes the mirror's own settings replaces it: the copies the old one still
// held in its queue are dropped, counted as stopped, and the new mirror copies from then on.
func TestMirrorReloadThatChangesTheMirrorDropsItsQueue(t *testing.T) {
	sim := startSimulator(t)
	sh := startGatedShadow(t)
	const engine = "gnet"
	svc, shadow := "changed", "changed-shadow"
	path := filepath.Join(t.TempDir(), "sluice.toml")
	conf := gatedMirrorConfig(engine, sim, sh.addr(), svc, shadow, "")
	g, addr, admin := startFileGateway(t, path, conf)
	stopped := mirrorSeries("sluice_mirror_dropped_total", svc, shadow, `,reason="stopped"`)
	depth := mirrorSeries("sluice_mirror_queue_depth", svc, shadow, "")
	stopped0, depth0 := metricValue(t, admin, stopped), metricValue(t, admin, depth)

	const n = 5
	sent := queueCopies(t, addr, admin, sh, svc, shadow, n)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(conf, "queue_size = 64", "queue_size = 32", 1)), 0o644))
	require.NoError(t, g.Reload())
	waitMetric(t, admin+"/metrics", stopped, func(v float64) bool { return v == stopped0+n-1 })
	waitMetric(t, admin+"/metrics", depth, func(v float64) bool { return v == depth0 })

	sent = append(sent, sendChats(t, g.Addr("web"), n, n+1)...)
	sh.open()
	require.Equal(t, sent[n:], sh.wait(t, 1), "the new mirror copies the request after the reload")
}
