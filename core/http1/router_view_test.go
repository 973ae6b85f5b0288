package http1

import "testing"

func TestRouterViewQueryValue(t *testing.T) {
	tests := []struct {
		query, name, value string
		found              bool
	}{
		{"a=1&a=2", "a", "1", true},
		{"&&a=1", "a", "1", true},
		{"a", "a", "", true},
		{"a=", "a", "", true},
		{"a=b=c", "a", "b=c", true},
		{"x=1&ab=2", "a", "", false},
		{"A=1", "a", "", false},
		{"a%20b=1", "a b", "", false},
		{"a%20b=1", "a%20b", "1", true},
		{"model=gpt%2D4", "model", "gpt%2D4", true},
		{"", "a", "", false},
		{"=v", "", "v", true},
	}
	for _, tt := range tests {
		r, err := parseReq(t, "GET /p?"+tt.query+" HTTP/1.1\r\nHost: h\r\n\r\n", nil)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := r.QueryValue(tt.name)
		if ok != tt.found || string(v) != tt.value {
			t.Errorf("QueryValue(%q) in %q = %q, %v; want %q, %v", tt.name, tt.query, v, ok, tt.value, tt.found)
		}
	}
}

func TestRouterViewHeaderValue(t *testing.T) {
	r, err := parseReq(t, "GET / HTTP/1.1\r\nHost: h\r\nX-Model:  gpt-4o \r\nx-model: second\r\nX-Empty:\r\n\r\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"X-Model", "x-model", "X-MODEL"} {
		if v, ok := r.HeaderValue(name); !ok || string(v) != "gpt-4o" {
			t.Errorf("HeaderValue(%q) = %q, %v", name, v, ok)
		}
	}
	if v, ok := r.HeaderValue("x-empty"); !ok || len(v) != 0 {
		t.Errorf("HeaderValue(x-empty) = %q, %v", v, ok)
	}
	if _, ok := r.HeaderValue("x-mode"); ok {
		t.Error("HeaderValue(x-mode) found")
	}
	if string(r.MethodBytes()) != "GET" || string(r.PathBytes()) != "/" || string(r.HostBytes()) != "h" {
		t.Errorf("view: %q %q %q", r.MethodBytes(), r.PathBytes(), r.HostBytes())
	}
}
