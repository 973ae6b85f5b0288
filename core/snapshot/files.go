package snapshot

import (
	"fmt"

	"github.com/sluice-gw/sluice/core/config"
	"github.com/sluice-gw/sluice/core/consumer"
	"github.com/sluice-gw/sluice/core/middleware/jwtauth"
	"github.com/sluice-gw/sluice/core/tlscert"
)

// CheckFiles returns the problems, in Compile's words, of the files cfg names that Compile
// reads, without compiling anything else: each entrypoint's TLS certificates, and each jwt
// middleware's public_key_file or jwks_file (or the key set at its jwks_url, which it fetches).
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
		if err := tlsError(cfg, name, ep.TLS); err != nil {
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

// tlsError loads the certificates of entrypoint name's TLS settings t, as a bind would, and
// returns why they do not load, at the position of its tls key; nil when they do.
func tlsError(cfg *config.Config, name string, t *config.TLS) *config.Error {
	if _, err := tlscert.Load(tlscert.PairsOf(t)); err != nil {
		return cfg.Errorf([]string{"entrypoints", name, "tls"}, "entrypoints.%s.tls: %s", name, cfg.MaskEnv(err.Error(), "entrypoints", name, "tls"))
	}
	return nil
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
