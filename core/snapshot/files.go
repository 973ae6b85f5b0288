package snapshot

import (
	"fmt"
	"os"
	"strconv"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/middleware/jwtauth"
	"github.com/sluice-gw/sluice/core/tlscert"
)

// CheckFiles returns the problems, in Compile's words, of the files cfg names that Compile
// reads, without compiling anything else: each entrypoint's TLS certificates, each service's
// upstream CA file (load_balancer.tls.ca_file), and each jwt middleware's public_key_file or
// jwks_file (or the key set at its jwks_url, which it fetches).
// It is for a configuration that did not load (config.LoadPartial), so that one report holds
// both kinds of problem: a part with a problem of its own (config.Config.InError) is left out,
// since the file it names may be what is wrong, or come from an unset ${VAR}. The list is
// sorted by position; nil when every file checked loads.
func CheckFiles(cfg *config.Config) config.ErrorList {
	var errs config.ErrorList
	for _, name := range sortedKeys(cfg.Entrypoints) {
		ep := cfg.Entrypoints[name]
		if ep == nil || ep.TLS == nil || cfg.InError("entrypoints", name, "tls") {
			continue
		}
		errs = append(errs, tlsErrors(cfg, name, ep.TLS)...)
	}
	for _, name := range sortedKeys(cfg.Services) {
		svc := cfg.Services[name]
		if svc == nil || svc.LoadBalancer == nil || svc.LoadBalancer.TLS == nil || cfg.InError("services", name, "load_balancer", "tls") {
			continue
		}
		if _, _, err := upstreamRoots(cfg, name, svc.LoadBalancer.TLS); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range sortedKeys(cfg.Middlewares) {
		mw := cfg.Middlewares[name]
		if mw == nil || mw.JWT == nil || cfg.InError("middlewares", name) {
			continue
		}
		if _, err := jwtStage(cfg, name, mw.JWT, nil); err != nil {
			errs = append(errs, err)
		}
	}
	errs.Sort()
	return errs
}

// tlsErrors checks the certificates of entrypoint name's TLS settings t as a bind would load
// them: each file that cannot be read is an error at the position of the key naming it
// (cert_file or key_file, of tls or of an element of tls.certificates), so that every missing
// file is reported at once; when they all read, why the certificates do not load (a bad PEM,
// a key that is not the certificate's) is one error at the position of the tls key. nil when
// they load.
func tlsErrors(cfg *config.Config, name string, t *config.TLS) config.ErrorList {
	var errs config.ErrorList
	// unreadable adds an error, named shown, when file cannot be opened; at is its key path.
	unreadable := func(file, shown string, at ...string) {
		f, err := os.Open(file)
		if err == nil {
			_ = f.Close()
			return
		}
		errs = append(errs, &config.Error{Pos: cfg.ValuePos(at...), Msg: fmt.Sprintf("%s: %s", shown, cfg.MaskEnv(err.Error(), at...))})
	}
	tlsKey := []string{"entrypoints", name, "tls"}
	if t.CertFile != "" || t.KeyFile != "" {
		unreadable(t.CertFile, "entrypoints."+name+".tls.cert_file", "entrypoints", name, "tls", "cert_file")
		unreadable(t.KeyFile, "entrypoints."+name+".tls.key_file", "entrypoints", name, "tls", "key_file")
	}
	for i, c := range t.Certificates {
		at := fmt.Sprintf("entrypoints.%s.tls.certificates[%d]", name, i)
		unreadable(c.CertFile, at+".cert_file", "entrypoints", name, "tls", "certificates", strconv.Itoa(i), "cert_file")
		unreadable(c.KeyFile, at+".key_file", "entrypoints", name, "tls", "certificates", strconv.Itoa(i), "key_file")
	}
	if errs != nil {
		return errs
	}
	if _, err := tlscert.Load(tlscert.PairsOf(t)); err != nil {
		errs = append(errs, cfg.Errorf(tlsKey, "entrypoints.%s.tls: %s", name, cfg.MaskEnv(err.Error(), tlsKey...)))
	}
	return errs
}

// jwtStage builds jwt middleware name's stage from its options o, reading the key files they
// name; a key that does not load is an error at the position of the option that names it
// (public_key_file, jwks_file or jwks_url).
func jwtStage(cfg *config.Config, name string, o *config.JWTOptions, consumers *consumer.Registry) (*jwtauth.Stage, *config.Error) {
	st, err := jwtauth.New(*o, consumers)
	if err == nil {
		return st, nil
	}
	key := "public_key_file"
	if o.JWKSFile != "" {
		key = "jwks_file"
	} else if o.JWKSURL != "" {
		key = "jwks_url"
	}
	at := []string{"middlewares", name, key}
	return nil, &config.Error{Pos: cfg.ValuePos(at...), Msg: fmt.Sprintf("middlewares.%s.%s: %s", name, key, cfg.MaskEnv(err.Error(), at...))}
}
