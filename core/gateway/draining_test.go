package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A transport leaves the listening entrypoints and joins the draining ones in one step, under
// the lock the health answer reads both lists with: replaced or removed, it is never in
// neither list.
func TestEntrypointJoinsTheDrainingOnesAsItLeavesTheTable(t *testing.T) {
	g := &Gateway{eps: map[string]*entrypoint{}}
	old, repl := &entrypoint{name: "web"}, &entrypoint{name: "web"}
	g.setEntrypoint(old)
	live, draining := g.entrypointsAndDraining()
	require.Equal(t, []*entrypoint{old}, live)
	require.Empty(t, draining)

	g.setEntrypoint(repl)
	live, draining = g.entrypointsAndDraining()
	require.Equal(t, []*entrypoint{repl}, live)
	require.Equal(t, []*entrypoint{old}, draining, "the replaced transport drains")

	g.removeEntrypoint(repl)
	live, draining = g.entrypointsAndDraining()
	require.Empty(t, live)
	require.Equal(t, []*entrypoint{old, repl}, draining, "the removed transport drains")

	g.drained(old)
	g.drained(repl)
	_, draining = g.entrypointsAndDraining()
	require.Empty(t, draining)
}
