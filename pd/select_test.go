package pd_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/bench/llmsim"
	"github.com/sluice-gw/sluice/bench/testenv"
	"github.com/sluice-gw/sluice/pd"
)

// Workers of another deployment generation or execution config digest are never part of a
// pair, though they are ready, healthy and of the right role.
func TestWrongGenerationOrDigestNeverChosen(t *testing.T) {
	bad := func(id string, role llmsim.Role, gen int64, digest string) llmsim.InstanceConfig {
		ic := fastInstance()
		ic.WorkerID, ic.Role, ic.Generation, ic.Digest = id, role, gen, digest
		return ic
	}
	f := startFleet(t, nil,
		bad("prefill-oldgen", llmsim.RolePrefill, 2, "sha256:good"),
		bad("prefill-otherdigest", llmsim.RolePrefill, 3, "sha256:other"),
		bad("decode-oldgen", llmsim.RoleDecode, 2, "sha256:good"),
		bad("decode-nodigest", llmsim.RoleDecode, 3, ""),
	)
	g := startGateway(t, f.gatewayTOML("", ""))
	// Each bad worker ranks first for some of these prompts: only eligibility keeps it out.
	for _, w := range f.ids[4:] {
		others := []string{"prefill-a", "prefill-b", "decode-a", "decode-b"}
		msg := promptRankedFirst(t, w, others...)
		status, data := stream(t, g, chatBody(msg))
		require.Equal(t, 200, status, data)
	}
	for i := 4; i < len(f.ids); i++ {
		require.Empty(t, f.sim.Calls(i), "%s got protocol calls", f.ids[i])
	}
}

// Two gateway processes (the sluice binary, run twice), given the same request in the same
// fleet state, choose the same decode worker: selection depends on the observed loads and on
// rendezvous ranking only, never on state a process keeps to itself.
func TestDecodeChoiceIdenticalAcrossGatewayProcesses(t *testing.T) {
	f := startFleet(t, nil)
	t.Setenv(workerKeyEnv, workerKey)
	bin := testenv.BuildBinary(t, "./cmd/sluice")
	var webs, admins []string
	for k := range 2 {
		web, admin := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		toml := strings.Replace(f.gatewayTOML("", ""), `address = "127.0.0.1:0"`, `address = "`+web+`"`, 1)
		toml = strings.Replace(toml, `address = "127.0.0.1:0"`, `address = "`+admin+`"`, 1)
		path := filepath.Join(t.TempDir(), fmt.Sprintf("gw%d.toml", k))
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
		p := testenv.StartProcess(t, bin, "serve", "--config", path)
		p.WaitHTTP(t, "http://"+admin+"/api/gateway/health", 10*time.Second)
		webs, admins = append(webs, web), append(admins, admin)
	}
	msgs := []string{promptRankedFirst(t, "decode-a", "decode-b"), promptRankedFirst(t, "decode-b", "decode-a"), "same request 1", "same request 2"}
	seen := map[string]bool{}
	for n, msg := range msgs {
		var chosen [2]string
		for k, web := range webs {
			waitIdleObserved(t, f, admins...)
			before := decodeCount(f)
			status, data := streamTo(t, web, chatBody(msg))
			require.Equal(t, 200, status, data)
			for _, w := range []int{decodeA, decodeB} {
				if len(f.executions(w, "decode")) > before[w] {
					chosen[k] = f.ids[w]
				}
			}
		}
		require.NotEmpty(t, chosen[0])
		require.Equal(t, chosen[0], chosen[1], "request %d", n)
		seen[chosen[0]] = true
	}
	require.Len(t, seen, 2, "both decode workers were chosen for some request")
}

func decodeCount(f *fleet) map[int]int {
	return map[int]int{decodeA: len(f.executions(decodeA, "decode")), decodeB: len(f.executions(decodeB, "decode"))}
}

// waitIdleObserved waits until no worker runs a sequence and every gateway (by admin
// address) has observed the fleet since (the same state seen from all).
func waitIdleObserved(t *testing.T, f *fleet, admins ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		busy := false
		for i := range f.ids {
			st := f.sim.Stats(i)
			busy = busy || st.Running > 0 || st.Waiting > 0
		}
		if !busy {
			break
		}
		require.True(t, time.Now().Before(deadline), "fleet not idle within 5s")
		time.Sleep(2 * time.Millisecond) // polling for the condition, not asserting on time
	}
	// An observation received after the fleet went idle may still have been taken before:
	// its poll was on the way. The poll after it was sent later, so wait for two.
	idle := time.Now()
	waitObservedSince(t, idle, deadline, admins)
	waitObservedSince(t, time.Now(), deadline, admins)
}

// waitObservedSince waits until every gateway (by admin address) has received an observation
// of every worker after since.
func waitObservedSince(t *testing.T, since, deadline time.Time, admins []string) {
	t.Helper()
	for _, admin := range admins {
		for {
			resp, err := http.Get("http://" + admin + "/api/gateway/workers")
			require.NoError(t, err)
			var rows []struct {
				ReceivedAt time.Time `json:"received_at"`
			}
			err = json.NewDecoder(resp.Body).Decode(&rows)
			resp.Body.Close()
			require.NoError(t, err)
			fresh := true
			for _, r := range rows {
				fresh = fresh && r.ReceivedAt.After(since)
			}
			if fresh {
				break
			}
			require.True(t, time.Now().Before(deadline), "no fresh observation within 5s")
			time.Sleep(5 * time.Millisecond) // polling for the condition, not asserting on time
		}
	}
}

// Rendezvous ranking is a pure function: stable, and spread over the workers.
func TestRankIsDeterministicAndSpreads(t *testing.T) {
	ids := []string{"decode-a", "decode-b", "decode-c"}
	wins := map[string]int{}
	for n := 0; n < 3000; n++ {
		key := pd.RequestKey([]byte(fmt.Sprintf("request %d", n)))
		require.Equal(t, pd.Rank(key, "decode-a"), pd.Rank(key, "decode-a"))
		best, br := "", uint64(0)
		for _, id := range ids {
			if r := pd.Rank(key, id); best == "" || r > br {
				best, br = id, r
			}
		}
		wins[best]++
	}
	for _, id := range ids {
		require.InDelta(t, 1000, wins[id], 150, "%s won %d of 3000", id, wins[id])
	}
}

// Concurrent requests count in their workers' loads from the start of the exchange, so that
// identical requests (one rendezvous ranking) chosen before the next observation still
// spread over the decode and prefill workers.
func TestConcurrentIdenticalRequestsSpread(t *testing.T) {
	f := startFleet(t, func(i int, ic *llmsim.InstanceConfig) {
		if i == prefillA || i == prefillB {
			ic.FaultRate, ic.Fault = 1, "slow=300ms" // the requests overlap
		}
	})
	g := startGateway(t, f.gatewayTOML("", ""))
	concurrentStreams(t, func() (int, []string, error) { return streamErr(g.Addr("web"), chatBody("the same")) }, 8)
	for _, w := range []int{prefillA, prefillB, decodeA, decodeB} {
		require.NotEmpty(t, f.sim.Calls(w), "%s took part", f.ids[w])
	}
}
