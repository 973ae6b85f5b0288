package config

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// durationKeys lists the key path of every duration key of the schema, with "x" for the name
// of a named table. A duration inside an array of tables would need an index: there is none.
func durationKeys(t *testing.T, typ reflect.Type, prefix []string) [][]string {
	var out [][]string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := f.Tag.Get("toml")
		if !f.IsExported() || tag == "" || tag == "-" || tag == ",remain" {
			continue
		}
		path := append(append([]string(nil), prefix...), tag)
		ft := f.Type
		switch {
		case ft == reflect.TypeOf(time.Duration(0)):
			out = append(out, path)
		case ft.Kind() == reflect.Map:
			out = append(out, durationKeys(t, ft.Elem().Elem(), append(path, "x"))...)
		case ft.Kind() == reflect.Pointer:
			out = append(out, durationKeys(t, ft.Elem(), path)...)
		case ft.Kind() == reflect.Struct:
			out = append(out, durationKeys(t, ft, path)...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			require.Empty(t, durationKeys(t, ft.Elem(), path), "a duration in an array of tables: extend this test")
		}
	}
	return out
}

// A duration written as a bare number is refused, at every duration key, with the string to
// write instead.
func TestEveryDurationKeySaysWhichStringToWrite(t *testing.T) {
	keys := durationKeys(t, reflect.TypeOf(Config{}), nil)
	require.GreaterOrEqual(t, len(keys), 8, "the schema's duration keys: %v", keys)
	var lines []string
	for _, k := range keys {
		lines = append(lines, strings.Join(k, ".")+" = 30")
	}
	_, err := LoadBytes("d.toml", doc(lines...))
	require.Error(t, err)
	for i, k := range keys {
		require.Contains(t, err.Error(), "d.toml:"+strconv.Itoa(i+1)+":", "%s", strings.Join(k, "."))
		require.Contains(t, err.Error(), strings.Join(k, ".")+` must be a duration string such as "30s", not an integer`)
	}
	_, err = LoadBytes("d.toml", doc(`entrypoints.x.drain_timeout = 1.5`, `entrypoints.x.idle_timeout = "90"`))
	require.Error(t, err)
	require.Contains(t, err.Error(), `d.toml:1:31: entrypoints.x.drain_timeout must be a duration string such as "1.5s", not a float`)
	require.Contains(t, err.Error(), `d.toml:2:30: entrypoints.x.idle_timeout: invalid duration "90" (a duration needs a unit: write "90s")`)
	// A duration too long for one is told as such, not as a malformed one.
	_, err = LoadBytes("d.toml", doc(`entrypoints.x.idle_timeout = "2562048h"`, `entrypoints.x.drain_timeout = "1h30x"`))
	require.Error(t, err)
	require.Contains(t, err.Error(), `entrypoints.x.idle_timeout: invalid duration "2562048h" (too long: a duration is at most 2562047h47m16s, about 292 years)`)
	require.Contains(t, err.Error(), `entrypoints.x.drain_timeout: invalid duration "1h30x" (want a positive duration such as "500ms", "15s" or "5m")`)
}

// A value TOML cannot read gets an error naming its key and saying how to write it.
func TestSyntaxErrorNamesTheKeyAndHowToWriteIt(t *testing.T) {
	for _, c := range []struct{ data, want string }{
		{"[entrypoints.web]\naddress = \"127.0.0.1:8080\"\ndrain_timeout = 30s\n",
			`s.toml:3:19: entrypoints.web.drain_timeout: expected newline but got U+0073 's' (a duration is a string: write drain_timeout = "30s")`},
		{"[entrypoints.web]\naddress = 127.0.0.1:8080 # the gateway\n",
			`s.toml:2:16: entrypoints.web.address: float can have at most one decimal point (a string is quoted: write address = "127.0.0.1:8080")`},
		{"[log]\nlevel = info\n",
			`s.toml:2:12: log.level: expected newline but got U+006F 'o' (a string is quoted: write level = "info")`},
		{"services.s.load_balancer.dial_timeout = 1m30s\n",
			`s.toml:1:42: services.s.load_balancer.dial_timeout: expected newline but got U+006D 'm' (a duration is a string: write services.s.load_balancer.dial_timeout = "1m30s")`},
		{"[entrypoints.web]\naddress = \"127.0.0.1:8080\nengine = \"gnet\"\n",
			`s.toml:2:26: entrypoints.web.address: the string is not closed on its line: end it with " (a " inside it is written \"; text over several lines goes between """ and """)`},
		{"[log]\nlevel = \"info\\\"\n",
			`s.toml:2:16: log.level: the string is not closed on its line: end it with " (a " inside it is written \"; text over several lines goes between """ and """)`},
		{"[log]\nlevel = \"info",
			`s.toml:2:14: log.level: the string is not closed on its line: end it with " (a " inside it is written \"; text over several lines goes between """ and """)`},
		{"[log]\nlevel = 'info",
			`s.toml:2:14: log.level: the string is not closed on its line: end it with ' (text over several lines goes between ''' and ''')`},
		{"[services.s.load_balancer]\nservers = [\n  { url = \"http://127.0.0.1:8000, weight = 1 },\n]\n",
			`s.toml:3:48: services.s.load_balancer.servers: the string is not closed on its line: end it with " (a " inside it is written \"; text over several lines goes between """ and """)`},
		{"[log]\nlevel = \nformat = \"text\"\n",
			`s.toml:2:9: log.level: the value is missing after = (write one; a string is quoted, as in level = "text")`},
		{"[log]\nlevel =   # the default\n",
			`s.toml:2:11: log.level: the value is missing after = (write one; a string is quoted, as in level = "text")`},
		{"[log]\nlevel = 'info\nformat = 'text'\n",
			`s.toml:2:14: log.level: the string is not closed on its line: end it with ' (text over several lines goes between ''' and ''')`},
	} {
		_, err := LoadBytes("s.toml", []byte(c.data))
		require.EqualError(t, err, c.want)
	}
}
