package snapshot

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gw/sluice/core/config"
)

// Every key of [services.<name>.scaling] either defines the replicas (a change replaces the
// scaler, scalerKey) or is policy (applied in place, scalerPolicy), and none is both: a key
// added later that neither sees would be dropped by a reload without a word.
func TestEveryScalingKeyIsKeyOrPolicy(t *testing.T) {
	base := config.Scaling{
		Executor: config.ExecutorExec, MaxReplicas: 2, ReadyPath: "/health", ReadyInterval: time.Second,
		StartupTimeout: time.Minute, Exec: &config.ScalingExec{Command: []string{"llmsim", "{port}"}},
	}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		changed := base
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch v.Kind() {
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 7)
		case reflect.Float64:
			v.SetFloat(v.Float() + 0.25)
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Pointer:
			// A table (exec, kube): another one in its place.
			v.Set(reflect.New(f.Type.Elem()))
		default:
			t.Fatalf("scaling key %s: a field of kind %s this test cannot change", f.Name, v.Kind())
		}
		inKey := scalerKey(&base) != scalerKey(&changed)
		inPolicy := scalerPolicy(&base) != scalerPolicy(&changed)
		require.True(t, inKey != inPolicy, "scaling key %s: in the replicas' key %v, in the policy %v", f.Name, inKey, inPolicy)
	}
}
