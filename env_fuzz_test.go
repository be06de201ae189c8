package baton

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/names"
)

// FuzzLoadEnv sets two of LoadEnv's variables (picked by index) to arbitrary values, plus one more
// variable of any name: loading never panics; a refusal wraps ErrInvalidConfig, names the variable
// and stays on one line (values are quoted, so a hostile value cannot forge log lines); an unknown
// BATON_* name is always refused, but for the client namespaces and Kubernetes service links; an
// accepted value lands in its field as the rules say (durations positive, lists and labels trimmed
// and without empty items, numbers and flags as parsed, strings trimmed). The seed corpus is in
// testdata/fuzz/FuzzLoadEnv.
func FuzzLoadEnv(f *testing.F) {
	f.Add(uint8(0), "billing", uint8(1), "orders, refunds", "")
	f.Add(uint8(8), "10s", uint8(5), "zone=a, tier = gold", "BATON_QUEUS")
	f.Add(uint8(12), "signal-with-start", uint8(6), "-3", "PATH")
	f.Add(uint8(19), "1e400", uint8(9), "-1s", "BATON_\n")
	f.Add(uint8(0), "billing", uint8(0), "billing", "BATON_X\n{\"level\":\"info\"}")
	f.Fuzz(func(t *testing.T, pick1 uint8, value1 string, pick2 uint8, value2 string, extra string) {
		v1, v2 := envVars[int(pick1)%len(envVars)], envVars[int(pick2)%len(envVars)]
		set := map[string]string{v1.name: value1, v2.name: value2}
		if extra != "" && !strings.ContainsAny(extra, "=\x00") { // what an environment can hold
			if _, known := set[extra]; !known {
				set[extra] = "x"
			}
		}
		lookup, environ := env(set)
		c, err := loadEnv(Config{}, lookup, environ, nil)
		unknown := strings.HasPrefix(extra, EnvPrefix) && set[extra] == "x" && !isEnvVar(extra) &&
			!clientEnv(extra) && !IsServiceLinkEnv(extra)
		if err != nil {
			named := strings.Contains(err.Error(), v1.name) || strings.Contains(err.Error(), v2.name) ||
				unknown && (strings.Contains(err.Error(), extra) || strings.Contains(err.Error(), names.Quote(extra)))
			switch {
			case !errors.Is(err, ErrInvalidConfig):
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			case !named:
				t.Fatalf("error %q names none of %s, %s, %q", err, v1.name, v2.name, extra)
			case strings.ContainsAny(err.Error(), "\n\r"):
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		if unknown {
			t.Fatalf("unknown variable %q accepted", extra)
		}
		// The later of two settings of one variable is the one in force.
		checkField(t, c, v2.field, set[v2.name])
		if v1.name != v2.name {
			checkField(t, c, v1.field, value1)
		}
	})
}

func isEnvVar(name string) bool {
	for _, v := range envVars {
		if v.name == name {
			return true
		}
	}
	return false
}

// checkField asserts that the Config field at path (such as "Election.TTL") holds what raw allows.
func checkField(t *testing.T, c Config, path, raw string) {
	t.Helper()
	raw = strings.TrimSpace(raw)
	v := reflect.ValueOf(c)
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		if d, err := time.ParseDuration(raw); err != nil || x != d || x <= 0 {
			t.Fatalf("%s = %v from %q", path, x, raw)
		}
	case []string:
		for _, s := range x {
			if s == "" || s != strings.TrimSpace(s) || strings.Contains(s, ",") {
				t.Fatalf("%s = %q from %q", path, x, raw)
			}
		}
	case map[string]string:
		for k, val := range x {
			if k == "" || k != strings.TrimSpace(k) || val != strings.TrimSpace(val) || strings.ContainsAny(k+val, ",") {
				t.Fatalf("%s = %q from %q", path, x, raw)
			}
		}
	case int:
		if n, err := strconv.Atoi(raw); err != nil || x != n {
			t.Fatalf("%s = %d from %q", path, x, raw)
		}
	case float64:
		if f, err := strconv.ParseFloat(raw, 64); err != nil || x != f && !(x != x && f != f) {
			t.Fatalf("%s = %v from %q", path, x, raw)
		}
	case bool:
		if b, err := strconv.ParseBool(raw); err != nil || x != b {
			t.Fatalf("%s = %v from %q", path, x, raw)
		}
	case string:
		if x != raw {
			t.Fatalf("%s = %q from %q", path, x, raw)
		}
	default: // enumerations (start mode, step-down): only the listed words are accepted
		if raw == "" {
			t.Fatalf("%s accepted an empty value", path)
		}
	}
}
