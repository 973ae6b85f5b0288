package config

import (
	"testing"
	"time"
)

func TestEmbeddedDefaultLoads(t *testing.T) {
	c, err := LoadDefault()
	if err != nil {
		t.Fatalf("LoadDefault: %v", err)
	}
	web := c.Entrypoints["web"]
	if web == nil || web.Address != "127.0.0.1:8080" || web.Engine != EngineGnet {
		t.Fatalf("entrypoint web = %+v", web)
	}
	if web.ReadHeaderTimeout != 10*time.Second || web.MaxBodyBytes != 16<<20 || !web.Multicore {
		t.Fatalf("entrypoint web defaults = %+v", web)
	}
	r := c.Routers["llm"]
	if r == nil || r.Rule != "PathPrefix(`/`)" || r.Service != "llm" || len(r.Entrypoints) != 1 || r.Entrypoints[0] != "web" {
		t.Fatalf("router llm = %+v", r)
	}
	lb := c.Services["llm"].LoadBalancer
	if lb.Servers[0].URL != "http://127.0.0.1:8000" || lb.Servers[0].Weight != 1 {
		t.Fatalf("service llm = %+v", lb)
	}
	if c.Admin.Address != "127.0.0.1:9090" {
		t.Fatalf("admin = %+v", c.Admin)
	}
	if p := c.Pos("routers", "llm", "rule"); p.File != DefaultName || p.Line < 1 {
		t.Fatalf("Pos(routers.llm.rule) = %v", p)
	}
}
