package clients

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// A Config printed with any fmt verb, logged with zap or marshalled to JSON shows whether a
// secret is set, never the secret.
func TestConfigNeverPrintsSecrets(t *testing.T) {
	c := Config{EtcdEndpoints: []string{"https://e:2379"}, EtcdUsername: "baton", EtcdPassword: "etcd-s3cret",
		TemporalAPIKey: "temporal-s3cret", RedisUsername: "baton", RedisPassword: "redis-s3cret"}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d", "%x", "%T %[1]v"} {
		out = append(out, fmt.Sprintf(verb, c), fmt.Sprintf(verb, &c), fmt.Sprintf(verb, struct{ C Config }{c}))
	}
	var buf bytes.Buffer
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zap.DebugLevel))
	log.Info("config", zap.Any("clients", c), zap.Stringer("stringer", c), zap.Reflect("reflect", c))
	out = append(out, buf.String())
	j, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, string(j))
	all := strings.Join(out, "\n")
	for _, secret := range []string{"etcd-s3cret", "temporal-s3cret", "redis-s3cret"} {
		if strings.Contains(all, secret) {
			t.Fatalf("%s printed:\n%s", secret, all)
		}
	}
	if !strings.Contains(out[0], "EtcdPassword:[redacted]") || !strings.Contains(out[0], "EtcdUsername:baton") {
		t.Fatalf("String() = %s", out[0])
	}
	if empty := fmt.Sprint(Config{}); strings.Contains(empty, "redacted") {
		t.Fatalf("an unset secret shows as set: %s", empty)
	}
}

// Errors of LoadEnv name the variable, never a secret's value.
func TestLoadEnvNeverEchoesSecrets(t *testing.T) {
	env := map[string]string{"BATON_ETCD_PASSWORD": "etcd-s3cret", "BATON_REDIS_PASSWORD": "redis-s3cret",
		"BATON_TEMPORAL_API_KEY": "temporal-s3cret", "BATON_REDIS_DB": "x"}
	_, err := loadEnv(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err == nil || !strings.Contains(err.Error(), "BATON_REDIS_DB") {
		t.Fatalf("loadEnv = %v", err)
	}
	for _, v := range env {
		if v != "x" && strings.Contains(err.Error(), v) {
			t.Fatalf("error echoes a secret: %v", err)
		}
	}
}
