package config

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"

	"github.com/sluice-gw/sluice/core/router"
)

// Warning is something in a valid configuration that is likely a mistake: a part of it that
// routes nothing. Its text is "file:line:col: warning: message".
type Warning struct {
	Pos Position
	Msg string
}

// String returns "file:line:col: warning: message".
func (w Warning) String() string { return w.Pos.String() + ": warning: " + w.Msg }

// Warnings lists the parts of c that can route nothing, sorted by position: no routers at all,
// a router that no request reaches on any of its entrypoints, an entrypoint that no router
// serves, a model router with no models, a service scaled by the exec executor whose program
// is not found (on PATH, or at its path). Such a configuration loads and serves (every request
// it cannot route gets 404; a scaled service's requests wait for a replica that never starts),
// so these are not errors.
func (c *Config) Warnings() []Warning {
	var ws []Warning
	add := func(p Position, format string, args ...any) {
		ws = append(ws, Warning{Pos: p, Msg: fmt.Sprintf(format, args...)})
	}
	if len(c.Routers) == 0 {
		top := Position{Line: 1, Col: 1}
		if len(c.files) > 0 {
			top.File = c.files[0]
		}
		add(top, "no routers: every request gets 404; add a [routers.<name>] with a rule and a service")
		return ws
	}

	served := map[string]bool{}
	for _, name := range sortedNames(c.Routers) {
		r := c.Routers[name]
		reached := false
		var shadows []string
		above := 0 // the highest priority among the routers tried first
		for _, ep := range r.Entrypoints {
			served[ep] = true
			by := c.shadowedBy(name, ep)
			if by == "" {
				reached = true
				continue
			}
			p := c.effectivePriority(by)
			above = max(above, p)
			order := "is tried first"
			if p == c.effectivePriority(name) {
				order = "is tried first, its name sorting first at equal priority,"
			}
			shadows = append(shadows, fmt.Sprintf("on %s, routers.%s (%s) %s and matches every request it would", ep, by, c.priorityText(by), order))
		}
		if !reached && len(shadows) > 0 {
			// The priorities are spelt out: a priority left at 0 is the rule's length, so a
			// router given a small one (5) still comes after a short catch-all rule (15).
			add(c.ValuePos("routers", name, "rule"), "routers.%s serves on no entrypoint: %s (routers.%s has %s: give it a priority above %d, or narrow the other rule)",
				name, strings.Join(shadows, "; "), name, c.priorityText(name), above)
		}
		if r.Models && len(c.Models) == 0 {
			add(c.Pos("routers", name, "models"), "routers.%s is a model router but no [models.<alias>] is defined: every request it matches gets 404 model_not_found", name)
		}
	}
	for _, name := range sortedNames(c.Services) {
		sc := c.Services[name].Scaling
		if sc == nil || sc.Executor != "exec" || sc.Exec == nil || len(sc.Exec.Command) == 0 {
			continue
		}
		// The exec executor runs the command as exec.Command does, finding a bare name on PATH
		// and a path from the gateway's directory: a program not there starts no replica,
		// and the requests that wait for one time out with the reason only in the log.
		if _, err := exec.LookPath(sc.Exec.Command[0]); err != nil {
			at := []string{"services", name, "scaling", "exec", "command", "0"}
			add(c.ValuePos(at...), "services.%s.scaling.exec.command[0] %q: %v: no replica of the service can start (install it, give its absolute path, or put its directory on sluice's PATH)",
				name, c.shown(sc.Exec.Command[0], at...), c.MaskEnv(lookPathReason(err), at...))
		}
	}
	for _, name := range sortedNames(c.Entrypoints) {
		if !served[name] {
			add(c.Pos("entrypoints", name), "entrypoints.%s is served by no router: every request to it gets 404 (list it in a router's entrypoints, or leave a router's entrypoints out to serve on all)", name)
		}
	}
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].Pos.before(ws[j].Pos) })
	return ws
}

// lookPathReason is exec.LookPath's error without the name it repeats ("exec: \"x\": ").
func lookPathReason(err error) string {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err.Error()
	}
	return err.Error()
}

// shadowedBy names a router tried before router name on entrypoint ep whose rule matches every
// request name's rule does: the same rule, or PathPrefix(`/`), which matches every request. Of
// several it names the one of the highest priority (the first by name among equals), the one
// that name's priority has to pass. It returns "" when there is none that this check can tell
// (rules are not compared beyond that).
func (c *Config) shadowedBy(name, ep string) string {
	rule := ruleKey(c.Routers[name].Rule)
	self := c.effectivePriority(name)
	by, byPriority := "", 0
	for _, other := range sortedNames(c.Routers) {
		o := c.Routers[other]
		if other == name || !slices.Contains(o.Entrypoints, ep) {
			continue
		}
		p := c.effectivePriority(other)
		first := p > self || p == self && other < name
		if first && (ruleKey(o.Rule) == rule || ruleKey(o.Rule) == "PathPrefix(`/`)") && (by == "" || p > byPriority) {
			by, byPriority = other, p
		}
	}
	return by
}

// effectivePriority is the priority router name is tried by: its priority, or when that is 0
// the length of its rule (router.Route.EffectivePriority).
func (c *Config) effectivePriority(name string) int {
	r := c.Routers[name]
	rt := router.Route{RuleText: r.Rule, Priority: r.Priority}
	return rt.EffectivePriority()
}

// priorityText describes router name's priority for a warning: "priority 5", or "priority 14,
// the length of its rule" when it is left at 0.
func (c *Config) priorityText(name string) string {
	if c.Routers[name].Priority != 0 {
		return fmt.Sprintf("priority %d", c.Routers[name].Priority)
	}
	return fmt.Sprintf("priority %d, the length of its rule", c.effectivePriority(name))
}

// ruleKey is a rule without the spaces outside its backquoted arguments, so that two ways of
// spacing one rule compare equal.
func ruleKey(rule string) string {
	var b strings.Builder
	quoted := false
	for _, ch := range rule {
		if ch == '`' {
			quoted = !quoted
		}
		if !quoted && (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
			continue
		}
		b.WriteRune(ch)
	}
	return b.String()
}
