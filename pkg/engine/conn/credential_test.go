package conn

import (
	"testing"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestCredential checks the credential an endpoint opens with: its
// mechanism, and the authSource given, else the URI's, else the
// mechanism's default.
func TestCredential(t *testing.T) {
	t.Setenv("CRED_TEST_PASSWORD", "s3cret")
	for _, c := range []struct {
		name               string
		e                  config.Endpoint
		mech, source, user string
		password           bool
	}{
		{"SCRAM by default", config.Endpoint{URI: "mongodb://h/", Username: "u", PasswordEnv: "CRED_TEST_PASSWORD"}, "", "admin", "u", true},
		{"the URI's authSource", config.Endpoint{URI: "mongodb://h/?authSource=users", Username: "u", PasswordEnv: "CRED_TEST_PASSWORD"}, "", "users", "u", true},
		{"PLAIN", config.Endpoint{URI: "mongodb://h/", Username: "u", PasswordEnv: "CRED_TEST_PASSWORD", AuthMechanism: config.AuthPLAIN}, "PLAIN", "$external", "u", true},
		{"PLAIN with a source", config.Endpoint{URI: "mongodb://h/", Username: "u", PasswordEnv: "CRED_TEST_PASSWORD", AuthMechanism: config.AuthPLAIN, AuthSource: "ldap"}, "PLAIN", "ldap", "u", true},
		{"X.509", config.Endpoint{URI: "mongodb://h/", AuthMechanism: config.AuthX509}, "MONGODB-X509", "$external", "", false},
		{"AWS from the environment", config.Endpoint{URI: "mongodb://h/", AuthMechanism: config.AuthAWS}, "MONGODB-AWS", "$external", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cred, err := credential("source", c.e, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if cred.AuthMechanism != c.mech || cred.AuthSource != c.source || cred.Username != c.user || cred.PasswordSet != c.password {
				t.Errorf("credential = {mechanism %q, source %q, user %q, password set %v}, want {%q, %q, %q, %v}",
					cred.AuthMechanism, cred.AuthSource, cred.Username, cred.PasswordSet, c.mech, c.source, c.user, c.password)
			}
			if c.password && cred.Password != "s3cret" {
				t.Errorf("password not read from passwordEnv")
			}
		})
	}
}
