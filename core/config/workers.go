package config

// validateWorkers checks [services.<name>.workers] and reads its key from the environment.
func (c *Config) validateWorkers(e *errs, name string, w *Workers, lookup func(string) (string, bool)) {
	wp := []string{"services", name, "workers"}
	at := func(key string) Position { return c.ValuePos(append(append([]string(nil), wp...), key)...) }
	if w.ObserveInterval < MinObserveInterval || w.ObserveInterval > MaxObserveInterval {
		e.add(at("observe_interval"), "services.%s.workers.observe_interval %v: want %v..%v", name, w.ObserveInterval, MinObserveInterval, MaxObserveInterval)
	}
	if w.ObservationTTL <= w.ObserveInterval {
		// An observation would go stale before the next poll could replace it, and every
		// worker would flap out of selection between polls.
		e.add(at("observation_ttl"), "services.%s.workers.observation_ttl %v: want more than observe_interval (%v), e.g. 5 intervals", name, w.ObservationTTL, w.ObserveInterval)
	}
	if n := w.APIKeyEnv; n != "" {
		if !isEnvName(n) {
			e.add(at("api_key_env"), "services.%s.workers.api_key_env %q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", name, c.shown(n, append(wp, "api_key_env")...))
		} else if v, ok := lookup(n); !ok || v == "" {
			e.add(at("api_key_env"), "services.%s.workers.api_key_env: environment variable %s is not set or empty (it must hold the workers' bearer key)", name, n)
		} else {
			w.APIKey = v
		}
	}
}

// validateTargetBinding refuses a target that binds a deployment generation or an execution
// config digest on a service whose servers are not observed: no server could ever match.
func (c *Config) validateTargetBinding(e *errs, model, id string, t *Target) {
	svc := c.Services[t.Service]
	if svc == nil || svc.Workers.Observe || t.DeploymentGeneration <= 0 && t.ExecutionConfigDigest == "" {
		return
	}
	key := "deployment_generation"
	if t.DeploymentGeneration <= 0 {
		key = "execution_config_digest"
	}
	e.add(c.ValuePos("models", model, "targets", id, key), "models.%s.targets.%s.%s needs worker observations, but services.%s.workers.observe is false (no server could match)", model, id, key, t.Service)
}
